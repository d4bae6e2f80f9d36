"""The store's decisions as functions over plain values: no database, no settings, no clock.

What the consumer does with each due row, how an attempt ends, and what a chain does next.
The store's writes (tasks_core.store.backends) carry out what these decide.
"""

from __future__ import annotations

import dataclasses
import enum
import random
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from tasks_core import backoff, states
from tasks_core.gating import Decision
from tasks_core.states import TaskStatus
from tasks_core.store.values import (
    AssocChange,
    ClaimedTask,
    DueRow,
    Ending,
    Lease,
    LostAttempt,
    Outcome,
    Result,
    encode,
)

#: Statuses a parent can end in that cancel its waiting children.
UNSUCCESSFUL = states.FINAL - {TaskStatus.SUCCESS}

WORKER_LOST = {"type": "WorkerLost", "message": "no heartbeat within the timeout",
               "traceback": ""}
LOST_LAST_ATTEMPT = {"type": "WorkerLost",
                     "message": "attempts exhausted; the last one lost its worker", "traceback": ""}
GATE_DROPPED = {"type": "Dropped", "message": "gate dropped", "traceback": ""}
CANCELLED_WORKER_LOST = {"type": "Cancelled", "traceback": "",
                         "message": "cancelled while running; its worker stopped heartbeating"}


def assoc_change(target: TaskStatus, *, now: datetime, timeouts: states.Timeouts,
                 run_at: datetime | None = None, delay_s: float | None = None) -> AssocChange:
    """The assoc columns that go with `target` (the lifecycle table's row for it)."""
    return AssocChange(
        status=states.LIFECYCLE[target].assoc.value,
        next_trigger_at=states.next_trigger(target, now=now, timeouts=timeouts, run_at=run_at,
                                            delay_s=delay_s),
    )


# --- the consumer's due rows ------------------------------------------------------------------


@dataclass(kw_only=True)
class DuePlan:
    """Where each of a pass's due rows goes."""

    #: (priority, message lease) to push, in the order the rows came (the push order)
    enqueue: list[tuple[str, Lease]] = field(default_factory=list)
    bump: list[int] = field(default_factory=list)  #: enqueued with a new lease
    keep: list[int] = field(default_factory=list)  #: expired `enqueued` rows: lease kept
    drop: list[int] = field(default_factory=list)  #: a gate said drop
    dead: list[int] = field(default_factory=list)  #: lost their last attempt
    #: lost an attempt that a cancel had asked to stop: the cancel stands
    cancelled: list[int] = field(default_factory=list)
    lost: list[LostAttempt] = field(default_factory=list)  #: attempts whose worker went away
    reenqueued: Counter[str] = field(default_factory=Counter)  #: by the status they had


def plan_due(rows: Sequence[DueRow], *, decide: Callable[[str], Decision],
             now: datetime) -> DuePlan:
    """Enqueue, drop, postpone or dead-letter each due row.

    A row whose task is `processing` lost its worker (no heartbeat within the timeout): its
    attempt is recorded as lost, and the task goes dead if that was its last attempt, or ends
    `cancelled` if a cancel had asked its worker to stop it. An
    expired `enqueued` task keeps its lease: its first message may still be in a long queue,
    and whichever copy is popped first may claim it (a claim bumps the lease, so the other copy
    goes stale). Bumping it would make every message of a backlog older than the enqueue
    timeout stale before a worker reached it.
    """
    plan = DuePlan()
    for row in rows:
        if row.status not in states.ENQUEUEABLE:
            continue
        decision = decide(row.collection)
        if decision is Decision.POSTPONE:
            continue
        if decision is Decision.DROP:
            states.check_transition(row.status, TaskStatus.DROPPED)
            plan.drop.append(row.task_id)
            continue
        if row.status is TaskStatus.PROCESSING:
            plan.lost.append(LostAttempt(task_id=row.task_id, worker=row.worker,
                                         started_at=row.started_at or now))
            if row.cancel_requested:
                states.check_transition(row.status, TaskStatus.CANCELLED)
                plan.cancelled.append(row.task_id)
                continue
            if row.attempts >= row.max_attempts:
                plan.dead.append(row.task_id)
                continue
        states.check_transition(row.status, TaskStatus.ENQUEUED)
        if row.status is not TaskStatus.NEW:
            plan.reenqueued[row.status.value] += 1
        bump = row.status is not TaskStatus.ENQUEUED
        plan.enqueue.append((row.priority, Lease(row.task_id, row.lease + bump)))
        (plan.bump if bump else plan.keep).append(row.task_id)
    return plan


# --- how an attempt ends -------------------------------------------------------------------------


def bounded(result: Result, *, max_result_bytes: int) -> Result:
    """`result` with its value's JSON text (`value_json`, encoded here unless the executor
    encoded it), or a fatal ResultTooLarge in its place when that text is over
    `max_result_bytes` (the same result would come back from every retry), or a fatal
    ResultNotJSON when the value has no JSON text (NaN, from a remote worker)."""
    if result.outcome is not Outcome.SUCCESS:
        return result
    text = result.value_json
    if text is None:
        try:
            text = encode(result.value)
        except ValueError as exc:
            return _fatal(result, "ResultNotJSON",
                          f"the lambda returned a value that is not JSON: {exc}")
    size = len(text.encode())
    if size <= max_result_bytes:
        return result if result.value_json is not None \
            else dataclasses.replace(result, value_json=text)
    return _fatal(result, "ResultTooLarge", f"the result is {size} bytes; the limit is "
                  f"{max_result_bytes} (ATF_MAX_RESULT_BYTES)")


def _fatal(result: Result, kind: str, message: str) -> Result:
    return dataclasses.replace(result, outcome=Outcome.FATAL, value=None, value_json=None,
                               error={"type": kind, "message": message, "traceback": ""})


def ending(task: ClaimedTask, result: Result, *, now: datetime, timeouts: states.Timeouts,
           backoff_base_s: float, backoff_cap_s: float, timeout_grace_s: float,
           max_result_bytes: int, rand: Callable[[], float] = random.random) -> Ending:
    """What finishing one attempt writes.

    success -> success (fatal_failure when its result is over `max_result_bytes`); fatal ->
    fatal_failure; cancelled (a cancel stopped it) -> cancelled; retry or timeout -> retrying
    after the explicit delay or the lambda's backoff (`rand` draws its jitter), or dead when the
    attempts are used up. A timed-out lambda may run on for the worker's grace
    (`timeout_grace_s`), after which its process exits, so its task is not retried before
    twice that (workers/time_limits.py).
    """
    result = bounded(result, max_result_bytes=max_result_bytes)
    delay_s = None
    if result.outcome is Outcome.SUCCESS:
        target = TaskStatus.SUCCESS
    elif result.outcome is Outcome.FATAL:
        target = TaskStatus.FATAL_FAILURE
    elif result.outcome is Outcome.CANCELLED:
        target = TaskStatus.CANCELLED
    elif task.attempt >= task.max_attempts:
        target = TaskStatus.DEAD
    else:
        target = TaskStatus.RETRYING
        delay_s = result.delay_s
        if delay_s is None:
            delay_s = backoff.delay_s(task.attempt, base_s=backoff_base_s, cap_s=backoff_cap_s,
                                      rand=rand)
        if result.outcome is Outcome.TIMEOUT:
            delay_s = max(delay_s, 2 * timeout_grace_s)
    states.check_transition(TaskStatus.PROCESSING, target)
    succeeded = target is TaskStatus.SUCCESS
    return Ending(
        task_id=task.task_id, lease=task.lease, status=target,
        result=result.value if succeeded else None,
        result_json=result.value_json if succeeded and result.value is not None else None,
        error=result.error,
        finished_at=now if target in states.FINAL else None,
        assoc=assoc_change(target, now=now, timeouts=timeouts, delay_s=delay_s),
        worker=result.worker, started_at=result.started_at or now,
        # A last failed attempt is marked `dead`; a timed-out one keeps saying why it ended.
        outcome=(Outcome.DEAD if target is TaskStatus.DEAD and result.outcome is Outcome.RETRY
                 else result.outcome),
    )


# --- chains ------------------------------------------------------------------------------------


def parent_failed(parent_id: int, status: TaskStatus) -> dict[str, str]:
    """The last_error of a child cancelled because its parent ended `status`."""
    return {"type": "ParentFailed", "message": f"parent task {parent_id} ended {status}",
            "traceback": ""}


@dataclass(frozen=True, kw_only=True)
class Start:
    """How a new task starts, given its parents."""

    status: TaskStatus
    last_error: dict[str, str] | None = None  #: why it starts cancelled


def initial(parents: Sequence[int], parent_status: Mapping[int, TaskStatus]) -> Start:
    """`new` without parents or when all succeeded; `cancelled` when one has already failed
    (the first such one is named); `waiting` while any has yet to succeed."""
    failed = [p for p in parents if parent_status.get(p) in UNSUCCESSFUL]
    if failed:
        return Start(status=TaskStatus.CANCELLED,
                     last_error=parent_failed(failed[0], parent_status[failed[0]]))
    if any(parent_status.get(p) != TaskStatus.SUCCESS for p in parents):
        return Start(status=TaskStatus.WAITING)
    return Start(status=TaskStatus.NEW)


class ChildStep(enum.Enum):
    """What a waiting child does when one of its parents reaches a final status."""

    CANCEL = "cancel"  #: the parent did not succeed
    WAKE = "wake"  #: every parent has succeeded: the child becomes new
    WAIT = "wait"  #: another parent has yet to succeed


def child_step(parent_status: TaskStatus, all_parents: Iterable[TaskStatus] = ()) -> ChildStep:
    """A final `parent_status` cancels the child unless it is success; success wakes it once
    `all_parents` (the statuses of every parent it has) are success too."""
    if parent_status in UNSUCCESSFUL:
        return ChildStep.CANCEL
    if parent_status == TaskStatus.SUCCESS and all(
            status == TaskStatus.SUCCESS for status in all_parents):
        return ChildStep.WAKE
    return ChildStep.WAIT


def revives(all_parents: Iterable[TaskStatus]) -> bool:
    """A child its parent's failure cancelled waits again once that parent is requeued,
    unless another of its parents is still failed."""
    return not any(status in UNSUCCESSFUL for status in all_parents)

