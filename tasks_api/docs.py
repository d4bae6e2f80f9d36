"""The OpenAPI schema and its browsable page, served from installed packages (no CDN)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import HttpResponse
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.permissions import AllowAny
from rest_framework.request import Request

from tasks_api import defaults
from tasks_api.policy import ApiPolicy
from tasks_api.renderers import JsonErrorsMixin


class SchemaView(JsonErrorsMixin, SpectacularAPIView):
    """OpenAPI 3 (YAML; `?format=json` for JSON). Needs credentials, like the API."""

    authentication_classes = ApiPolicy.authentication_classes
    permission_classes = ApiPolicy.permission_classes
    throttle_classes = ApiPolicy.throttle_classes
    custom_settings = defaults.SCHEMA_SETTINGS


class DocsView(SpectacularSwaggerView):
    """Swagger UI for people: an anonymous browser is sent to the login page first."""

    authentication_classes = ApiPolicy.authentication_classes
    permission_classes = [AllowAny]

    @extend_schema(exclude=True)
    def get(self, request: Request, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path(), settings.LOGIN_URL)
        return super().get(request, *args, **kwargs)
