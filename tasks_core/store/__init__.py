"""Every write that changes a task's status: guarded (compare-and-set) updates of entity and assoc.

No other module changes a task's status. Each change names the status (and, for a worker, the
lease) it expects and updates the entity and its assoc row in one transaction; a guard that fails
changes nothing and comes back to the caller as False, an empty result or `None`.

The package keeps what is decided apart from how it is written: `decisions` holds the pure
rules (where each due row goes, how an attempt ends, what a chain does next), and every read
and write goes through one backend (`backends`), chosen once from the database: PostgreSQL's
batch statements, or the ORM for SQLite and any other database.

Lock order, which keeps PostgreSQL free of deadlocks: a worker's transition writes the entity
row, then the assoc row. The consumer locks assoc rows and then entity rows with SKIP LOCKED, so
it never waits for a row a worker holds; a worker that meets a row the consumer holds waits for
the consumer's short transaction and then finds its guard failed if the lease moved on.
"""

from __future__ import annotations

from tasks_core.store.consumer import enqueue_due, retrigger
from tasks_core.store.create import create
from tasks_core.store.guarded import transition
from tasks_core.store.operators import cancel, discard, requeue, run_now, stop_requested
from tasks_core.store.values import (
    CLAIMED_COLUMNS,
    HELD_COLUMNS,
    ClaimedTask,
    DueBatch,
    Lease,
    NewTask,
    Outcome,
    Result,
    encode,
    error_info,
)
from tasks_core.store.worker import (
    claim,
    exclusive,
    finish,
    finish_and_claim,
    finish_many,
    heartbeat,
    held,
    held_rows,
    release,
    start,
    start_many,
)

__all__ = [
    "CLAIMED_COLUMNS", "HELD_COLUMNS", "ClaimedTask", "DueBatch", "Lease", "NewTask", "Outcome",
    "Result", "cancel", "claim", "create", "discard", "encode", "enqueue_due", "error_info",
    "exclusive", "finish", "finish_and_claim", "finish_many", "heartbeat", "held", "held_rows",
    "release", "requeue", "retrigger",
    "run_now", "start", "start_many", "stop_requested", "transition",
]
