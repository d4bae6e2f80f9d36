"""The host project's own DRF defaults (its REST_FRAMEWORK names them); ATF's views must keep
theirs. Apart from views.py, which DRF's APIView imports these for."""

from __future__ import annotations

from typing import Any

from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.response import Response


class PlainNegotiation(DefaultContentNegotiation):
    """The host's content negotiation."""


def host_exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    """The host's error shape."""
    return Response({"host_error": str(exc)}, status=418)
