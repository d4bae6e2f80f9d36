"""The OpenAPI schema and its browsable page, served from installed packages (no CDN).

Both hold in any project: the schema lists ATF's own views only (wherever the project mounted
them, whatever other API it serves), drf-spectacular's settings are ATF's for the call (a
project's SPECTACULAR_SETTINGS describe its own API), and the page's Swagger UI always comes
from drf-spectacular-sidecar's static files.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import HttpResponse
from drf_spectacular.generators import EndpointEnumerator, SchemaGenerator
from drf_spectacular.settings import SPECTACULAR_DEFAULTS, patched_settings
from drf_spectacular.views import SCHEMA_KWARGS, SpectacularAPIView, SpectacularSwaggerView
from rest_framework.permissions import AllowAny
from rest_framework.request import Request

from tasks_api import defaults
from tasks_api.openapi import extend_schema
from tasks_api.policy import ApiPolicy
from tasks_api.renderers import JsonErrorsMixin

#: drf-spectacular's settings while ATF's schema or page is built: its defaults and ATF's
#: values, none of the project's (the SERVE_* ones are the views' own attributes).
SPECTACULAR_SETTINGS: dict[str, Any] = {
    **{name: value for name, value in SPECTACULAR_DEFAULTS.items()
       if not name.startswith("SERVE_") and name != "DEFAULT_GENERATOR_CLASS"},
    **defaults.SCHEMA_SETTINGS,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}


#: drf-spectacular patches its one settings object for the whole process while such a view
#: runs, and restores it from one shared record: two ATF views patching at once would restore
#: each other's values and leave ATF's in place for the project's own schema. One at a time.
_patching = threading.Lock()


class AtfEndpoints(EndpointEnumerator):
    """The project's URLs, of which only ATF's API views (those that take its policy)."""

    def should_include_endpoint(self, path: str, callback: Callable[..., Any]) -> bool:
        view = getattr(callback, "cls", None)
        return (isinstance(view, type) and issubclass(view, ApiPolicy)
                and super().should_include_endpoint(path, callback))


class AtfSchemaGenerator(SchemaGenerator):
    endpoint_inspector_cls = AtfEndpoints


class SchemaView(ApiPolicy, JsonErrorsMixin, SpectacularAPIView):
    """OpenAPI 3 (YAML; `?format=json` for JSON). Needs credentials, like the API."""

    renderer_classes = SpectacularAPIView.renderer_classes
    generator_class = AtfSchemaGenerator
    serve_public = False
    urlconf = None
    custom_settings = SPECTACULAR_SETTINGS

    @extend_schema(**SCHEMA_KWARGS)
    def get(self, request: Request, *args: Any, **kwargs: Any) -> HttpResponse:
        with _patching:  # SpectacularAPIView.get patches with custom_settings
            return super().get(request, *args, **kwargs)


class DocsView(ApiPolicy, SpectacularSwaggerView):
    """Swagger UI for people: an anonymous browser is sent to the login page first."""

    renderer_classes = SpectacularSwaggerView.renderer_classes
    permission_classes = [AllowAny]
    title = defaults.SCHEMA_SETTINGS["TITLE"]

    @extend_schema(exclude=True)
    def get(self, request: Request, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path(), settings.LOGIN_URL)
        with _patching, patched_settings(SPECTACULAR_SETTINGS):
            return super().get(request, *args, **kwargs)
