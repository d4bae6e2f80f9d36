"""System checks of a project that installs the API: the apps it relies on, and the few DRF
settings that reach every view alike, ATF's too."""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.conf import settings
from django.core import checks
from rest_framework.settings import DEFAULTS

#: DRF's own defaults, by name (its stubs type them as a TypedDict of literal keys).
DRF_DEFAULTS: dict[str, Any] = dict(DEFAULTS)
#: REST_FRAMEWORK keys that DRF reads for every view, so ATF's views cannot keep their own:
#: a project's value changes what ATF's API answers or accepts.
GLOBAL_DRF_SETTINGS = (
    "NON_FIELD_ERRORS_KEY", "DATETIME_FORMAT", "DATETIME_INPUT_FORMATS", "DATE_FORMAT",
    "DATE_INPUT_FORMATS", "TIME_FORMAT", "TIME_INPUT_FORMATS", "STRICT_JSON",
    "URL_FORMAT_OVERRIDE", "COERCE_DECIMAL_TO_STRING",
)


@checks.register("atf")
def check_required_apps(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """atf.E007 for an app the API cannot work without; atf.W001 and atf.W002 for the docs
    page's."""
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
    if not apps.is_installed("drf_spectacular_sidecar"):
        messages.append(checks.Warning(
            "'drf_spectacular_sidecar' is not in INSTALLED_APPS: the API's docs page cannot load "
            "Swagger UI (it never loads it from a CDN)",
            hint="Add it to serve the docs page's scripts and styles as static files.",
            id="atf.W002"))
    return messages


@checks.register("atf")
def check_global_drf_settings(app_configs: Any = None,
                              **kwargs: Any) -> list[checks.CheckMessage]:
    """atf.W003 for each REST_FRAMEWORK value that changes ATF's API along with the project's."""
    project = getattr(settings, "REST_FRAMEWORK", {})
    return [
        checks.Warning(
            f"REST_FRAMEWORK[{key!r}] is {project[key]!r}: DRF applies it to ATF's API too, "
            "whose clients expect DRF's default", id="atf.W003",
            hint=f"Leave it at {DRF_DEFAULTS[key]!r}, or set it on your own views' serializers.")
        for key in GLOBAL_DRF_SETTINGS
        if key in project and project[key] != DRF_DEFAULTS[key]
    ]
