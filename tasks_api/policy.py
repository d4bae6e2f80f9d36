"""The API's own DRF policy, so that it holds in any project whatever its REST_FRAMEWORK says.

A host project's defaults (its authentication, an AllowAny permission, its renderers) never
reach ATF's views: each view takes its authentication, permissions, parsers, renderers,
throttling, schema and error handling from `ApiPolicy` (or sets its own, as the probes do),
built from `tasks_api.defaults.REST_FRAMEWORK`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from django.utils.module_loading import import_string
from rest_framework.authentication import BaseAuthentication
from rest_framework.parsers import BaseParser
from rest_framework.renderers import BaseRenderer
from rest_framework.throttling import BaseThrottle

from tasks_api.defaults import REST_FRAMEWORK

if TYPE_CHECKING:
    from rest_framework.permissions import _PermissionClass


def _classes(key: str) -> list[Any]:
    # import_string() is untyped: each attribute below declares what its list holds.
    return [import_string(path) for path in REST_FRAMEWORK[key]]


class ApiPolicy:
    """Put first among a view's bases: its attributes come before APIView's project defaults."""

    authentication_classes: Sequence[type[BaseAuthentication]] = _classes(
        "DEFAULT_AUTHENTICATION_CLASSES")
    permission_classes: Sequence[_PermissionClass] = _classes("DEFAULT_PERMISSION_CLASSES")
    parser_classes: Sequence[type[BaseParser]] = _classes("DEFAULT_PARSER_CLASSES")
    renderer_classes: Sequence[type[BaseRenderer]] = _classes("DEFAULT_RENDERER_CLASSES")
    throttle_classes: Sequence[type[BaseThrottle]] = _classes("DEFAULT_THROTTLE_CLASSES")
    schema = import_string(REST_FRAMEWORK["DEFAULT_SCHEMA_CLASS"])()

    def get_exception_handler(self) -> Callable[[Exception, dict[str, Any]], Any]:
        return import_string(REST_FRAMEWORK["EXCEPTION_HANDLER"])
