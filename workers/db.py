"""Database connection care for long-running threads."""

from __future__ import annotations

import logging

from django.db import connections

logger = logging.getLogger(__name__)


def reset_connection() -> None:
    """Drop this thread's database connections so that the next query opens a fresh one.

    Django renews connections between requests; our threads loop forever, so after a database
    error (restart, terminated backend), or a lambda interrupted in the middle of its own
    queries, they must let go of the connection themselves.
    """
    for alias in connections:
        try:
            connections[alias].close()
        except Exception:  # noqa: BLE001 - closing a broken connection may fail; we only want it gone
            logger.debug("closing a database connection (%s) failed", alias, exc_info=True)
