"""What a worker or consumer process loads: its system checks leave the web side unimported."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT, subprocess_env

#: Imported only by checks that concern the web server (the URLconf and what it routes to).
WEB_MODULES = ("atf_project.urls", "rest_framework.views", "drf_spectacular.views")

_PROBE = """
import sys, django
django.setup()
from django.core.management import load_command_class
for name in ("runworker", "runconsumer"):
    command = load_command_class("workers", name)
    command.check({check_args})
print(",".join(m for m in {modules!r} if m in sys.modules))
"""


def _web_modules_loaded(check_args: str) -> str:
    """The web modules a fresh process holds after both commands' checks ran."""
    probe = _PROBE.format(check_args=check_args, modules=WEB_MODULES)
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT,
                            env=subprocess_env(ATF_DEMO="1"), capture_output=True, text=True,
                            timeout=60, check=True)
    return result.stdout.strip()


def test_the_long_running_commands_checks_import_nothing_of_the_web_side() -> None:
    assert _web_modules_loaded("tags=command.requires_system_checks") == ""


def test_the_full_checks_would_import_it() -> None:
    # The probe can tell: Django's full checks load the URLconf
    assert "atf_project.urls" in _web_modules_loaded("")
