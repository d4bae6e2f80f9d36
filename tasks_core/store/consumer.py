"""The consumer's side of the store: due rows enqueued, dropped or dead-lettered."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime

from tasks_core import flow, shards
from tasks_core.conf import atf_settings
from tasks_core.gating import Decision
from tasks_core.queues.base import Message
from tasks_core.states import TaskStatus
from tasks_core.store import backends, decisions, guarded, timeouts
from tasks_core.store.values import DueBatch, Lease


def enqueue_due(lambda_id: int, *, limit: int, now: datetime, skip_collections: Iterable[str],
                decide: Callable[[str], Decision]) -> DueBatch:
    """Take up to `limit` due rows of one lambda, and enqueue, drop or dead-letter each.

    Rows are taken and returned highest priority first (the order of ATF_PRIORITIES) and,
    within a priority, earliest trigger first, so the quota and the batch go to high priority
    first and the messages come back in the order they should be pushed. The new state is
    written before the caller pushes the returned messages, so a push that never happens is
    repaired when the enqueue timeout fires. Rows other consumers hold are skipped (SKIP
    LOCKED), so several consumers never enqueue one trigger twice.
    """
    backend = backends.current()
    batch = DueBatch()
    with shards.atomic():
        # During this transaction the due assoc rows and their entities are locked.
        rows = backend.due(lambda_id, limit=limit, now=now,
                           skip_collections=list(skip_collections),
                           priorities=list(atf_settings.priorities))
        if not rows:
            return batch
        plan = decisions.plan_due(rows, decide=decide, now=now)
        batch.reenqueued.update(plan.reenqueued)
        if plan.enqueue:
            backend.mark_enqueued(bump=plan.bump, keep=plan.keep, now=now,
                                  assoc=timeouts.assoc(TaskStatus.ENQUEUED, lambda_id, now))
            batch.messages = [(priority, Message(task_id=lease.task_id, lease=lease.lease))
                              for priority, lease in plan.enqueue]
        backend.record_lost(plan.lost, now=now, error=decisions.WORKER_LOST)
        batch.dropped = _end(plan.drop, TaskStatus.DROPPED, lambda_id, now,
                             decisions.GATE_DROPPED)
        batch.dead = _end(plan.dead, TaskStatus.DEAD, lambda_id, now,
                          decisions.LOST_LAST_ATTEMPT)
        _end(plan.cancelled, TaskStatus.CANCELLED, lambda_id, now,
             decisions.CANCELLED_WORKER_LOST)
        if plan.dead or plan.cancelled:  # their slots of a concurrency limit are free now
            flow.release_lapsed(lambda_id, plan.dead + plan.cancelled, now)
    return batch


def _end(task_ids: list[int], target: TaskStatus, lambda_id: int, now: datetime,
         last_error: Mapping[str, str]) -> int:
    if not task_ids:
        return 0
    backends.current().end(task_ids, target, now=now,
                           assoc=timeouts.assoc(target, lambda_id, now), last_error=last_error)
    for task_id in task_ids:
        guarded.after_final(task_id, target, now)
    return len(task_ids)


def retrigger(messages: Sequence[Message], *, at: datetime) -> int:
    """Bring forward the enqueue timeout of tasks whose messages could not be pushed."""
    with shards.atomic():
        return backends.current().retrigger([Lease(m.task_id, m.lease) for m in messages],
                                            at=at)
