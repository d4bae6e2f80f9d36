"""System checks of a project that installs the API: the apps it relies on."""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.core import checks


@checks.register("atf")
def check_required_apps(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """atf.E007 for an app the API cannot work without; atf.W001 for the docs page's."""
    messages: list[checks.CheckMessage] = [
        checks.Error(f"tasks_api needs {app!r} in INSTALLED_APPS", id="atf.E007",
                     hint="Add it; the API's views rely on it.")
        for app in ("rest_framework", "tasks_core")
        if not apps.is_installed(app)
    ]
    if not apps.is_installed("drf_spectacular"):
        messages.append(checks.Warning(
            "'drf_spectacular' is not in INSTALLED_APPS: the API's docs page cannot render",
            hint="Add it to serve the Swagger UI at the API's docs/.", id="atf.W001"))
    return messages
