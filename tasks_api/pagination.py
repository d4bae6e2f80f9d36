"""Cursor pagination of task lists, newest first."""

from __future__ import annotations

from typing import Any, cast

from django.db.models import QuerySet
from rest_framework.exceptions import NotFound
from rest_framework.pagination import Cursor, CursorPagination
from rest_framework.request import Request
from rest_framework.views import APIView

from tasks_api.serializers import BODY_PAGE_SIZE, SHOWN_ATTEMPTS
from tasks_core import shards
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

    #: Task lists live on every shard (a task's attempts, on its own).
    across_shards = True

    def paginate_queryset(self, queryset: Any, request: Request,
                          view: APIView | None = None) -> list[Any] | None:
        """With shards, each page is read on every shard and merged in id order (a cursor's
        position, an id, says where a page ends on every shard at once)."""
        if self.across_shards and shards.sharded():
            queryset = cast("QuerySet[Any, Any]", shards.Merged(queryset))
        return super().paginate_queryset(queryset, request, view)

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
    across_shards = False
    page_size = SHOWN_ATTEMPTS
    max_page_size = 100

    def last_page_ends_with(self, page: list[Any], attempt: Any | None) -> list[Any]:
        """`page` (of attempt rows) followed, on the last page, by `attempt`: the one a
        succeeded task's own row holds, which no row pages through (None: there is none). A
        last page that is full links on instead, to a page that holds only it."""
        if attempt is None or self.has_next:
            return page
        if len(page) < cast(int, self.page_size):
            self.page = [*page, attempt]  # the links read it: a page of it alone links back
            return self.page
        self.has_next, self.next_position = True, None  # next: the rows after the page's last
        return page
