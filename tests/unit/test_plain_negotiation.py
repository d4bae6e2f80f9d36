"""The API's content negotiation answers as DRF's does, the common case without parsing."""

from __future__ import annotations

from typing import Any

import pytest
from django.http import Http404
from rest_framework.exceptions import NotAcceptable
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import BrowsableAPIRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.test import APIRequestFactory

from tasks_api.renderers import PlainNegotiation, PrometheusRenderer

RENDERERS = [[JSONRenderer()], [PrometheusRenderer(), JSONRenderer()],
             [JSONRenderer(), BrowsableAPIRenderer()]]


def _answer(negotiation: Any, request: Request, renderers: list[Any],
            suffix: str | None) -> Any:
    try:
        renderer, media_type = negotiation.select_renderer(request, renderers, suffix)
    except (NotAcceptable, Http404) as exc:  # an unknown ?format= is a 404 in DRF
        return repr(exc)
    return type(renderer), media_type


@pytest.mark.parametrize("accept", [None, "*/*", "", "application/json", "text/plain",
                                    "text/html;q=0.5, */*", "image/png"])
@pytest.mark.parametrize("query", ["", "?format=json", "?format=txt"])
@pytest.mark.parametrize("suffix", [None, "json"])
@pytest.mark.parametrize("renderers", RENDERERS, ids=["json", "text", "browsable"])
def test_the_same_renderer_and_media_type_as_drf(accept: str | None, query: str,
                                                 suffix: str | None,
                                                 renderers: list[Any]) -> None:
    headers = {} if accept is None else {"HTTP_ACCEPT": accept}
    request = Request(APIRequestFactory().get(f"/api/v1/tasks/{query}", **headers))
    assert _answer(PlainNegotiation(), request, renderers, suffix) == \
        _answer(DefaultContentNegotiation(), request, renderers, suffix)
