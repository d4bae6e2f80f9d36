"""Renderers for views whose success answer is not JSON; their errors stay JSON."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from rest_framework.negotiation import BaseContentNegotiation, DefaultContentNegotiation
from rest_framework.parsers import BaseParser
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView


class PrometheusRenderer(BaseRenderer):
    """Passes through the text that prometheus_client produced."""

    media_type = "text/plain"
    format = "txt"
    charset = "utf-8"

    def render(self, data: Any, accepted_media_type: str | None = None,
               renderer_context: Mapping[str, Any] | None = None) -> bytes:
        return data if isinstance(data, bytes) else str(data).encode()


class FirstRenderer(BaseContentNegotiation):
    """Answers with the view's first renderer whatever the client accepts (no 406)."""

    def select_parser(self, request: Request,
                      parsers: Iterable[BaseParser]) -> BaseParser | None:
        return next(iter(parsers), None)

    def select_renderer(self, request: Request, renderers: Iterable[BaseRenderer],
                        format_suffix: str | None = None) -> tuple[BaseRenderer, str]:
        first = next(iter(renderers))
        return first, first.media_type


class PlainNegotiation(DefaultContentNegotiation):
    """DRF's negotiation, with the common case first: a request that accepts any type (no
    Accept header, or */*) and asks for no format (`?format=`, a suffix) gets the first
    renderer and its media type, as DRF answers it, without parsing the Accept header into
    media types on every request."""

    def select_renderer(self, request: Request, renderers: Iterable[BaseRenderer],
                        format_suffix: str | None = None) -> tuple[BaseRenderer, str]:
        override = self.settings.URL_FORMAT_OVERRIDE
        if (format_suffix is None and request.META.get("HTTP_ACCEPT", "*/*") == "*/*"
                and not (override and override in request.query_params)):
            renderers = list(renderers)
            if renderers:
                return renderers[0], renderers[0].media_type
        return super().select_renderer(request, renderers, format_suffix)


class JsonErrorsMixin(APIView):
    """Renders a view's errors (and OPTIONS) as JSON even when its answers are text or YAML."""

    def _answer_in_json(self) -> None:
        # finalize_response() renders with the request's renderer: make that one JSON.
        renderer = JSONRenderer()
        self.request.accepted_renderer = renderer
        self.request.accepted_media_type = renderer.media_type

    def handle_exception(self, exc: Exception) -> Response:
        self._answer_in_json()
        return super().handle_exception(exc)

    # DRF hands its views a Request, not Django's HttpRequest; APIView's own stub ignores the
    # same override error.
    def options(  # type: ignore[override]
            self, request: Request, *args: Any, **kwargs: Any) -> Response:
        self._answer_in_json()
        return super().options(request, *args, **kwargs)
