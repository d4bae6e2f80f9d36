"""Users' and operators' actions on tasks: cancel, requeue, run now, discard."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.db import transaction

from tasks_core import states
from tasks_core.exceptions import InvalidTransition
from tasks_core.models import TaskEntity
from tasks_core.states import TaskStatus
from tasks_core.store import backends, guarded


def cancel(task_id: int, *, now: datetime, reason: str = "cancelled") -> TaskStatus:
    """Cancel a task that no worker holds; return the status it had.

    Raises InvalidTransition for a task already claimed, running or finished.
    """
    backend = backends.current()
    for _ in range(5):  # the consumer may move it between our read and our write
        status = backend.statuses([task_id]).get(task_id)
        if status is None:
            raise TaskEntity.DoesNotExist(f"no task {task_id}")
        if status not in states.CANCELLABLE:
            raise InvalidTransition(f"a task in status {status} cannot be cancelled; only new, "
                                    "waiting, enqueued and retrying tasks can")
        error = {"type": "Cancelled", "message": reason, "traceback": ""}
        if guarded.transition(task_id, expected=status, lease=None, target=TaskStatus.CANCELLED,
                              now=now, finished_at=now, last_error=error):
            return status
    raise InvalidTransition("the task kept changing; try again")


def requeue(task_ids: Iterable[int], *, now: datetime,
            statuses: Iterable[TaskStatus] = (TaskStatus.DEAD,)) -> int:
    """Put finished tasks (by default dead ones) back to `new` with their attempts reset."""
    wanted = frozenset(statuses)
    for status in wanted:
        states.check_transition(status, TaskStatus.NEW)
    with transaction.atomic():
        ids = backends.current().requeue(list(task_ids), wanted, now=now)
        for pk in ids:
            guarded.after_requeue(pk, now)
    return len(ids)


def run_now(task_ids: Iterable[int], *, now: datetime) -> int:
    """Make scheduled or retrying tasks due now."""
    with transaction.atomic():
        return backends.current().run_now(list(task_ids), now=now)


def discard(task_ids: Iterable[int], *, statuses: Iterable[TaskStatus] = (TaskStatus.DEAD,)) -> int:
    """Delete finished tasks (by default dead ones) for good; return how many."""
    return backends.current().discard(list(task_ids), list(statuses))
