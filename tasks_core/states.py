"""The task lifecycle as data: statuses, allowed transitions and each status's assoc row.

Pure: no Django, no I/O. `tasks_core.store` is the only caller that acts on it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from tasks_core.exceptions import InvalidTransition


class TaskStatus(enum.StrEnum):
    NEW = "new"  #: scheduled; the consumer enqueues it when run_at passes
    WAITING = "waiting"  #: waits for its parent tasks; no trigger until they finish
    ENQUEUED = "enqueued"  #: in a queue; enqueued again if not claimed in time
    CLAIMED = "claimed"  #: a controller holds its lease
    PROCESSING = "processing"  #: an executor runs it and heartbeats
    RETRYING = "retrying"  #: failed, retriable; enqueued again after its backoff
    SUCCESS = "success"  #: the lambda returned; result stored
    FATAL_FAILURE = "fatal_failure"  #: the lambda raised Fatal
    DEAD = "dead"  #: attempts exhausted: in the dead-letter queue
    CANCELLED = "cancelled"  #: cancelled by a user, or a parent of its chain failed
    DROPPED = "dropped"  #: its lambda or collection was gated `dropped`


class AssocStatus(enum.StrEnum):
    NEW = "new"  #: not yet handed to a queue
    STARTED = "started"  #: somewhere between a queue and a result
    COMPLETED = "completed"  #: final; out of the consumer's index


class Trigger(enum.StrEnum):
    """How the next trigger time of a status is computed."""

    RUN_AT = "run_at"  #: the task's own run_at
    ENQUEUE_TIMEOUT = "enqueue_timeout"  #: now + enqueue timeout
    CLAIM_TIMEOUT = "claim_timeout"  #: now + claim timeout
    HEARTBEAT_TIMEOUT = "heartbeat_timeout"  #: now + the lambda's heartbeat timeout
    DELAY = "delay"  #: now + an explicit delay (backoff or Retry(delay))
    NONE = "none"  #: no trigger: final, or waiting for parents


@dataclass(frozen=True, kw_only=True)
class Lifecycle:
    """One row of the lifecycle table."""

    assoc: AssocStatus
    trigger: Trigger


#: The lifecycle table of docs/design.md: each status's assoc status and trigger.
LIFECYCLE: Mapping[TaskStatus, Lifecycle] = {
    TaskStatus.NEW: Lifecycle(assoc=AssocStatus.NEW, trigger=Trigger.RUN_AT),
    TaskStatus.WAITING: Lifecycle(assoc=AssocStatus.NEW, trigger=Trigger.NONE),
    TaskStatus.ENQUEUED: Lifecycle(assoc=AssocStatus.STARTED, trigger=Trigger.ENQUEUE_TIMEOUT),
    TaskStatus.CLAIMED: Lifecycle(assoc=AssocStatus.STARTED, trigger=Trigger.CLAIM_TIMEOUT),
    TaskStatus.PROCESSING: Lifecycle(assoc=AssocStatus.STARTED, trigger=Trigger.HEARTBEAT_TIMEOUT),
    TaskStatus.RETRYING: Lifecycle(assoc=AssocStatus.STARTED, trigger=Trigger.DELAY),
    TaskStatus.SUCCESS: Lifecycle(assoc=AssocStatus.COMPLETED, trigger=Trigger.NONE),
    TaskStatus.FATAL_FAILURE: Lifecycle(assoc=AssocStatus.COMPLETED, trigger=Trigger.NONE),
    TaskStatus.DEAD: Lifecycle(assoc=AssocStatus.COMPLETED, trigger=Trigger.NONE),
    TaskStatus.CANCELLED: Lifecycle(assoc=AssocStatus.COMPLETED, trigger=Trigger.NONE),
    TaskStatus.DROPPED: Lifecycle(assoc=AssocStatus.COMPLETED, trigger=Trigger.NONE),
}

#: Every allowed edge. ENQUEUED -> ENQUEUED and the edges out of CLAIMED and PROCESSING to
#: ENQUEUED are the consumer's re-enqueue of a task whose trigger expired; DROPPED is a gate
#: found `dropped` when a trigger fires; NEW out of a final status is a requeue, and
#: CANCELLED -> WAITING revives a chain's child when its failed parent is requeued. CLAIMED and
#: PROCESSING -> CANCELLED are a cancel of a task a worker holds: a claimed one at once, a
#: running one by its worker, which stops the lambda (STOPPABLE). ENQUEUED -> PROCESSING is a
#: claim that starts the task at once (for an idle executor), and ENQUEUED -> NEW the same
#: claim finding its gate paused; PROCESSING -> NEW hands back a task claimed and started that
#: its worker never gave an executor (a stopping worker), without counting its attempt.
TRANSITIONS: Mapping[TaskStatus, frozenset[TaskStatus]] = {
    TaskStatus.NEW: frozenset({TaskStatus.ENQUEUED, TaskStatus.CANCELLED, TaskStatus.DROPPED}),
    TaskStatus.WAITING: frozenset({TaskStatus.NEW, TaskStatus.CANCELLED}),
    TaskStatus.ENQUEUED: frozenset(
        {TaskStatus.CLAIMED, TaskStatus.PROCESSING, TaskStatus.NEW, TaskStatus.ENQUEUED,
         TaskStatus.CANCELLED, TaskStatus.DROPPED}
    ),
    TaskStatus.CLAIMED: frozenset(
        {TaskStatus.PROCESSING, TaskStatus.NEW, TaskStatus.ENQUEUED, TaskStatus.DROPPED,
         TaskStatus.CANCELLED}
    ),
    TaskStatus.PROCESSING: frozenset(
        {
            TaskStatus.SUCCESS,
            TaskStatus.FATAL_FAILURE,
            TaskStatus.RETRYING,
            TaskStatus.DEAD,
            TaskStatus.ENQUEUED,
            TaskStatus.NEW,
            TaskStatus.DROPPED,
            TaskStatus.CANCELLED,
        }
    ),
    TaskStatus.RETRYING: frozenset({TaskStatus.ENQUEUED, TaskStatus.CANCELLED, TaskStatus.DROPPED}),
    TaskStatus.SUCCESS: frozenset(),
    TaskStatus.FATAL_FAILURE: frozenset({TaskStatus.NEW}),
    TaskStatus.DEAD: frozenset({TaskStatus.NEW}),
    TaskStatus.CANCELLED: frozenset({TaskStatus.NEW, TaskStatus.WAITING}),
    TaskStatus.DROPPED: frozenset({TaskStatus.NEW}),
}

#: Statuses a user may cancel (docs/contract.md): not yet claimed by any worker.
CANCELLABLE = frozenset(
    {TaskStatus.NEW, TaskStatus.WAITING, TaskStatus.ENQUEUED, TaskStatus.RETRYING}
)
#: Statuses of a task a worker holds, which a cancel asks that worker to stop.
STOPPABLE = frozenset({TaskStatus.CLAIMED, TaskStatus.PROCESSING})
#: Statuses whose expiry the consumer handles by enqueueing the task (again).
ENQUEUEABLE = frozenset(
    {
        TaskStatus.NEW,
        TaskStatus.ENQUEUED,
        TaskStatus.CLAIMED,
        TaskStatus.PROCESSING,
        TaskStatus.RETRYING,
    }
)
#: Final statuses.
FINAL = frozenset(s for s, row in LIFECYCLE.items() if row.assoc is AssocStatus.COMPLETED)
#: Final statuses that nothing leads out of (no requeue): a task's assoc row is deleted when
#: it reaches one, since nothing reads or revives it again, where the other final statuses keep
#: theirs `completed` (a requeue sets it `new`). The drain's commonest ending then writes a
#: delete instead of a new row version and its primary-key entry, and the assoc table holds
#: the live tasks and those a requeue may revive, not the history of successes.
ASSOC_DELETED = frozenset(s for s in FINAL if not TRANSITIONS[s])
#: Statuses of tasks not finished yet.
LIVE = frozenset(TaskStatus) - FINAL
#: Statuses counted from the task rows (one range of the task_lambda_status index each per
#: lambda, so only those rows are read): the live ones and the dead letters, which a requeue
#: or a clear takes away.
#: The other final statuses are counted from the rollup of outcomes (tasks_core.outcomes),
#: which a prune never lowers.
COUNTED_FROM_ROWS = LIVE | {TaskStatus.DEAD}
#: Statuses a requeue (dead-letter queue, console) puts back to `new`.
REQUEUEABLE = frozenset(s for s in FINAL if TaskStatus.NEW in TRANSITIONS[s])


@dataclass(frozen=True, kw_only=True)
class Timeouts:
    """The durations the trigger rules need, in seconds."""

    enqueue_s: float
    claim_s: float
    heartbeat_s: float


def check_transition(current: TaskStatus, target: TaskStatus) -> None:
    """Raise InvalidTransition unless `current -> target` is an edge of TRANSITIONS."""
    if target not in TRANSITIONS[current]:
        raise InvalidTransition(f"{current} -> {target} is not allowed")


def next_trigger(
    status: TaskStatus,
    *,
    now: datetime,
    timeouts: Timeouts,
    run_at: datetime | None = None,
    delay_s: float | None = None,
) -> datetime | None:
    """When the consumer should next look at a task in `status`, or None for never."""
    rule = LIFECYCLE[status].trigger
    if rule is Trigger.RUN_AT:
        return run_at or now
    if rule is Trigger.ENQUEUE_TIMEOUT:
        return now + timedelta(seconds=timeouts.enqueue_s)
    if rule is Trigger.CLAIM_TIMEOUT:
        return now + timedelta(seconds=timeouts.claim_s)
    if rule is Trigger.HEARTBEAT_TIMEOUT:
        return now + timedelta(seconds=timeouts.heartbeat_s)
    if rule is Trigger.DELAY:
        return now + timedelta(seconds=delay_s or 0.0)
    return None


def assoc_row(
    status: TaskStatus,
    *,
    now: datetime,
    timeouts: Timeouts,
    run_at: datetime | None = None,
    delay_s: float | None = None,
) -> dict[str, object]:
    """The assoc columns that go with `status`: its assoc status and next trigger."""
    return {
        "status": LIFECYCLE[status].assoc.value,
        "next_trigger_at": next_trigger(
            status, now=now, timeouts=timeouts, run_at=run_at, delay_s=delay_s
        ),
    }
