"""Renderers for views whose success answer is not JSON; their errors stay JSON."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from rest_framework.negotiation import BaseContentNegotiation
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
