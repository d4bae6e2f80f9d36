"""The host project's own API: a DRF view under the project's defaults."""

from __future__ import annotations

from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView


class PingView(APIView):
    """A view of the host's own, with DRF's own schema class (not drf-spectacular's)."""

    def get(self, request: Request) -> Response:
        return Response({"pong": True})
