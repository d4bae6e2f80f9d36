"""Cursor pagination of task lists, newest first."""

from __future__ import annotations

from rest_framework.exceptions import NotFound
from rest_framework.pagination import Cursor, CursorPagination
from rest_framework.request import Request

from tasks_api.serializers import BODY_PAGE_SIZE, SHOWN_ATTEMPTS
from tasks_core.conf import atf_settings


class TaskCursorPagination(CursorPagination):
    """`?cursor=` from `next`/`previous`; `?page_size=` up to 1000."""

    ordering = "-id"
    page_size = atf_settings.api_page_size
    page_size_query_param = "page_size"
    max_page_size = 1000

    def get_page_size(self, request: Request) -> int | None:
        size = super().get_page_size(request)
        if size is not None and request.query_params.get("fields"):
            return min(size, BODY_PAGE_SIZE)  # pages of payloads or results: bytes bounded
        return size

    def decode_cursor(self, request: Request) -> Cursor | None:
        cursor = super().decode_cursor(request)
        # A hand-made cursor could carry a position that is not an id; refuse it here rather
        # than let the database reject it.
        position = None if cursor is None else cursor.position
        if position is not None and not (str(position).isdigit() and len(str(position)) <= 18):
            raise NotFound(self.invalid_cursor_message)
        return cursor


class AttemptCursorPagination(TaskCursorPagination):
    """A task's attempts, oldest first; `?page_size=` up to 100 (an attempt's error may be
    ~110 KB)."""

    ordering = "number"
    page_size = SHOWN_ATTEMPTS
    max_page_size = 100
