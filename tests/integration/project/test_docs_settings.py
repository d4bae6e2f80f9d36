"""What the docs tell a newcomer to write works as written: the README's settings for a host
project pass ATF's checks and take the docs' own `@task(queue_name=...)`, and the backoff
formula the docs give is the code's."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import override_settings
from django.urls import include, path

from tasks_api.checks import check_required_apps
from tasks_core import backoff
from tasks_core.contrib.django_tasks import ATFBackend
from tasks_core.contrib.tasks_compat import task
from tests.conftest import ROOT

#: What `django-admin startproject` installs.
STARTPROJECT_APPS = [
    "django.contrib.admin", "django.contrib.auth", "django.contrib.contenttypes",
    "django.contrib.sessions", "django.contrib.messages", "django.contrib.staticfiles",
]
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def readme_settings() -> dict[str, Any]:
    """The README's settings for your own project, run on top of a new project's."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Add ATF to your Django project"):]
    block = next(code for code in PYTHON_BLOCK.findall(section) if "INSTALLED_APPS" in code)
    names: dict[str, Any] = {"INSTALLED_APPS": list(STARTPROJECT_APPS), "urlpatterns": [],
                             "path": path, "include": include}
    exec(block, names)  # noqa: S102 - the README's own code
    return names


def send_welcome(user_id: int) -> None:
    """A `@task` function as the docs write one."""


def test_the_readmes_apps_pass_atfs_checks() -> None:
    with override_settings(INSTALLED_APPS=readme_settings()["INSTALLED_APPS"]):
        assert [message.id for message in check_required_apps()] == []


def test_the_readmes_tasks_setting_takes_the_docs_own_queue_name() -> None:
    # docs/lambdas.md: @task(priority=10, queue_name="emails")
    emails = task(queue_name="emails")(send_welcome)
    ATFBackend("default", readme_settings()["TASKS"]["default"]).validate_task(emails)


@pytest.mark.parametrize("page", ["docs/lambdas.md", "docs/settings.md"])
def test_the_backoff_formula_of_the_docs_is_the_codes(page: str) -> None:
    # Before attempt n + 1 a task waits random() × min(cap, base × 2^(n-1)).
    text = (ROOT / page).read_text()
    assert "min(cap, base × 2^(n-1))" in text and "2**attempt" not in text
    assert backoff.delay_s(3, base_s=1.0, cap_s=100.0, rand=lambda: 1.0) == 1.0 * 2 ** (3 - 1)
