"""One consumer at a time per lambda, from its due query to its push.

Several consumers share the due rows (SKIP LOCKED), so without this one consumer could push a
lambda's low-priority tasks while another is still pushing its high-priority ones, and a
waiting worker would start the low ones first. On PostgreSQL a consumer takes an advisory lock
per lambda for its turn and skips a lambda another consumer holds; elsewhere (SQLite, one
writer at a time) every turn is granted.

The lock is scoped to a transaction (`pg_try_advisory_xact_lock`) that a connection of the
consumer's own (one per thread) keeps open for the turn, because the turn outlives the store's
transaction: the tasks are pushed after it commits. A lock scoped to the session would leak
behind a transaction-mode pooler (PgBouncer's `pool_mode = transaction`): the unlock runs on
whichever server connection the pooler hands out next, and the server that holds the lock
goes back to the pool still holding it, so no consumer is granted that lambda again.

A test's consumer passes (workers.testing) take their turns on the test's own connection
(`lambda_turn_in_caller`): a connection of their own would outlive the test and keep its
database from being dropped.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from django.db.backends.base.base import BaseDatabaseWrapper

from tasks_core import pooling, shards

#: The first key of ATF's advisory locks (the second is the lambda's id): "ATF" in ASCII.
LOCK_NAMESPACE = 0x415446

_local = threading.local()


def _turns_connection() -> BaseDatabaseWrapper:
    """This thread's connection for turns, to the shard the store works on (the store's work
    goes on Django's own): a lambda's turns are per shard."""
    wrapper = getattr(_local, "wrapper", None)
    if wrapper is not None and wrapper.alias != shards.current():
        reset()
        wrapper = None
    if wrapper is None:
        wrapper = _local.wrapper = pooling.own_connection(shards.current())
    return wrapper


def reset() -> None:
    """Drop this thread's turns connection (after a database error); the next turn opens one."""
    wrapper = getattr(_local, "wrapper", None)
    if wrapper is not None:
        _local.wrapper = None
        with contextlib.suppress(Exception):  # closing a broken connection may fail
            wrapper.close()


@contextlib.contextmanager
def lambda_turn(lambda_id: int) -> Iterator[bool]:
    """Whether this process may enqueue `lambda_id` now; the turn lasts until the block ends."""
    if shards.connection().vendor != "postgresql":
        yield True
        return
    wrapper = _turns_connection()
    wrapper.ensure_connection()
    try:
        with wrapper.wrap_database_errors, wrapper.connection.transaction():
            (granted,) = wrapper.connection.execute(
                "SELECT pg_try_advisory_xact_lock(%s, %s)", [LOCK_NAMESPACE, lambda_id]
            ).fetchone()
            yield granted  # the transaction, and the lock with it, ends with the block
    except BaseException:
        raw = wrapper.connection
        if raw is None or raw.broken or raw.closed:  # not when only the turn's work failed
            reset()
        raise


@contextlib.contextmanager
def lambda_turn_in_caller(lambda_id: int) -> Iterator[bool]:
    """`lambda_turn` on this thread's own connection, in whatever transaction it is in: the lock
    lasts until that transaction ends (a test's, rolled back at its end), or for the statement
    alone in autocommit. For a single consumer in a test, where no separate connection may
    outlive the test."""
    connection = shards.connection()
    if connection.vendor != "postgresql":
        yield True
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s, %s)", [LOCK_NAMESPACE, lambda_id])
        (granted,) = cursor.fetchone()
    yield granted
