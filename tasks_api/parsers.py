"""A JSON parser that bounds the body it reads and never lets bad input become a 500."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser
from rest_framework.utils import json

from tasks_api.exceptions import RequestTooLarge

logger = logging.getLogger(__name__)


class BoundedJSONParser(JSONParser):
    """JSONParser that refuses bodies over DATA_UPLOAD_MAX_MEMORY_SIZE with 413.

    DRF reads the body stream itself, so Django's own check of that setting never runs.
    """

    def parse(self, stream: Any, media_type: str | None = None,
              parser_context: dict[str, Any] | None = None) -> Any:
        context = parser_context or {}
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        request = context.get("request")
        if limit is not None and request is not None:
            try:
                length = int(request.META.get("CONTENT_LENGTH") or 0)
            except ValueError:
                length = 0
            if length > limit:
                raise RequestTooLarge(f"The request body is {length} bytes; the limit is {limit}.")
        body = stream.read() if limit is None else stream.read(limit + 1)
        if limit is not None and len(body) > limit:
            raise RequestTooLarge(f"The request body is over the limit of {limit} bytes.")
        encoding = context.get("encoding", settings.DEFAULT_CHARSET)
        try:
            return json.loads(body.decode(encoding), parse_constant=json.strict_constant)
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            raise ParseError(f"JSON parse error - {exc}"[:500]) from exc
