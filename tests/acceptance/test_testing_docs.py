"""The examples of docs/testing-lambdas.md run as written: its pytest and TestCase blocks,
taken from the page, are the test modules of a pytest run in the example shop
(examples/shop), on its SQLite (in memory: pytest-django's test database) and this run's
Redis."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from tasks_core.conf import atf_settings
from tests.conftest import ROOT

pytestmark = pytest.mark.slow

PAGE = ROOT / "docs" / "testing-lambdas.md"
SHOP = ROOT / "examples" / "shop"
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def section_code(page: str, heading: str) -> str:
    """The first Python block under `heading`."""
    return PYTHON_BLOCK.findall(page[page.index(heading):])[0]


def test_the_pages_pytest_and_testcase_examples_pass_in_the_shop(tmp_path: Path) -> None:
    # Given the page's two examples as the test modules of the shop
    page = PAGE.read_text()
    (tmp_path / "test_with_pytest.py").write_text(section_code(page, "## With pytest"))
    (tmp_path / "test_with_testcase.py").write_text(
        section_code(page, "## With Django's TestCase"))
    env = {
        "PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"),
        "PYTHONPATH": f"{SHOP}{os.pathsep}{ROOT}", "DJANGO_SETTINGS_MODULE": "shop.settings",
        "REDIS_URL": settings.REDIS_URL, "SHOP_QUEUE_PREFIX": f"{atf_settings.queue_prefix}-docs",
    }
    # When pytest runs them, with ATF's plugin as an installed django-atf would load it
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "workers.pytest_plugin", "-p",
         "no:cacheprovider", "--create-db", "-c", os.devnull, "--rootdir", str(tmp_path),
         str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    # Then each of the page's three tests passed
    assert ran.returncode == 0, ran.stdout[-4000:] + ran.stderr[-2000:]
    assert "3 passed" in ran.stdout, ran.stdout[-2000:]
