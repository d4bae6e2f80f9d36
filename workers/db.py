"""Database connection care for long-running threads."""

from __future__ import annotations

import logging

from django.db import connection

logger = logging.getLogger(__name__)


def reset_connection() -> None:
    """Drop this thread's database connection so that the next query opens a fresh one.

    Django renews connections between requests; our threads loop forever, so after a database
    error (restart, terminated backend) they must let go of the broken connection themselves.
    """
    try:
        connection.close()
    except Exception:  # noqa: BLE001 - closing a broken connection may fail; we only want it gone
        logger.debug("closing a broken database connection failed", exc_info=True)
