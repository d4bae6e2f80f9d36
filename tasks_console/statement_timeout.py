"""Console list pages under a statement timeout: `ATF_CONSOLE_STATEMENT_TIMEOUT_MS`.

A list's filters and search reach the task table, and a query the indexes cannot answer would
keep a database connection busy for as long as it scans. Each list page runs in a transaction
of its own whose statements PostgreSQL cancels past the limit (`set_config(...,
is_local => true)`, SET LOCAL: it ends with the transaction, so a transaction-mode pooler hands
on a clean connection); the page then answers 503 with a message, not a 500. SQLite has no
statement timeout: there the page runs as it is.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import OperationalError, connection, transaction

from tasks_core.conf import atf_settings

logger = logging.getLogger(__name__)

SETTING = "ATF_CONSOLE_STATEMENT_TIMEOUT_MS"
#: PostgreSQL's SQLSTATE of a statement cancelled by its timeout (query_canceled).
QUERY_CANCELED = "57014"


class TimedOut(Exception):
    """A list page's query ran past the statement timeout, and was cancelled."""


def _set(value: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('statement_timeout', %s, true)", [value])


def _current() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('statement_timeout')")
        return str(cursor.fetchone()[0])


@contextmanager
def limited() -> Iterator[None]:
    """A transaction whose statements may each run `ATF_CONSOLE_STATEMENT_TIMEOUT_MS`; TimedOut
    when one ran longer. Within a transaction of the caller's (ATOMIC_REQUESTS, a test), the
    caller's timeout is put back after the page."""
    limit_ms = atf_settings.console_statement_timeout_ms
    applies = bool(limit_ms) and connection.vendor == "postgresql"
    outer = connection.in_atomic_block
    try:
        with transaction.atomic():
            before = _current() if applies and outer else None
            if applies:
                _set(str(limit_ms))
            yield
            if before is not None:
                _set(before)
    except OperationalError as exc:
        if getattr(exc.__cause__, "sqlstate", None) != QUERY_CANCELED:
            raise
        logger.warning("a console list ran past %s (%d ms)", SETTING, limit_ms,
                       extra={"action": "console_statement_timeout", "setting": SETTING})
        raise TimedOut(f"The list took longer than {SETTING} allows ({limit_ms} ms) and was "
                       "stopped. Narrow it with the filters, or search by task id.") from exc
