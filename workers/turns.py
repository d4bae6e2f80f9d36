"""One consumer at a time per lambda, from its due query to its push.

Several consumers share the due rows (SKIP LOCKED), so without this one consumer could push a
lambda's low-priority tasks while another is still pushing its high-priority ones, and a
waiting worker would start the low ones first. On PostgreSQL a consumer takes a session-level
advisory lock per lambda for its turn and skips a lambda another consumer holds; elsewhere
(SQLite, one writer at a time) every turn is granted.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from django.db import DatabaseError, connection

#: The first key of ATF's advisory locks (the second is the lambda's id): "ATF" in ASCII.
LOCK_NAMESPACE = 0x415446


@contextlib.contextmanager
def lambda_turn(lambda_id: int) -> Iterator[bool]:
    """Whether this process may enqueue `lambda_id` now; the turn lasts until the block ends."""
    if connection.vendor != "postgresql":
        yield True
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", [LOCK_NAMESPACE, lambda_id])
        (granted,) = cursor.fetchone()
    try:
        yield granted
    finally:
        if granted:
            # A broken connection has let go of the lock with its session.
            with contextlib.suppress(DatabaseError), connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [LOCK_NAMESPACE, lambda_id])
