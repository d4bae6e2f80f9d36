"""Every view of the API carries the API's own DRF policy, so a host project's REST_FRAMEWORK
defaults (e.g. AllowAny) never reach it (tests/acceptance/test_host_project.py runs a project
with such defaults)."""

from __future__ import annotations

from collections.abc import Iterator
from importlib import import_module

from django.urls import URLPattern, URLResolver
from rest_framework.views import APIView

from tasks_api.policy import ApiPolicy


def _view_classes(patterns: list) -> Iterator[type]:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from _view_classes(pattern.url_patterns)
        elif isinstance(pattern, URLPattern):
            yield pattern.callback.cls  # type: ignore[attr-defined]


def test_every_api_view_takes_the_api_policy() -> None:
    views = {cls for module in ("tasks_api.urls", "tasks_api.health_urls")
             for cls in _view_classes(import_module(module).urlpatterns)}
    assert len(views) >= 8
    for view in views:
        assert issubclass(view, ApiPolicy), view
        # ApiPolicy comes before every class that reads the project's REST_FRAMEWORK
        assert view.__mro__.index(ApiPolicy) < view.__mro__.index(APIView), view
