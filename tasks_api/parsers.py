"""A JSON parser that never lets bad input become a 500."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

logger = logging.getLogger(__name__)


class SafeJSONParser(JSONParser):
    """JSONParser that also answers 400 for nesting too deep for Python's parser.

    The body size is bounded by DATA_UPLOAD_MAX_MEMORY_SIZE: DRF reads JSON bodies through
    Django's `request.body`, whose RequestDataTooBig the exception handler answers with 413.
    """

    def parse(self, stream: Any, media_type: str | None = None,
              parser_context: Mapping[str, Any] | None = None) -> Any:
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError as exc:
            raise ParseError("JSON parse error - nested too deeply.") from exc
