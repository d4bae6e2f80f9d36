"""Start-up checks shared by the long-running commands: fail fast, in one line."""

from __future__ import annotations

from django.core.management.base import CommandError
from django.db import DatabaseError, connection

from tasks_core import queues
from tasks_core.exceptions import AtfError


def require_store_and_queue() -> queues.QueueBackend:
    """Check that the database and the queue service answer; return a queue client.

    Raises CommandError with a one-line reason otherwise.
    """
    try:
        connection.ensure_connection()
    except DatabaseError as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CommandError(f"cannot reach the database: {first_line}") from exc
    try:
        queue = queues.backend()
        queue.ping()
    except AtfError as exc:
        raise CommandError(str(exc)) from exc
    return queue


def positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise ValueError(text)
    return value


def positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise ValueError(text)
    return value
