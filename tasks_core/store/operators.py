"""Users' and operators' actions on tasks: cancel, requeue, run now, discard."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from tasks_core import shards, states
from tasks_core.exceptions import InvalidTransition
from tasks_core.models import TaskEntity
from tasks_core.states import TaskStatus
from tasks_core.store import backends, guarded


@shards.by_task
def cancel(task_id: int, *, now: datetime, reason: str = "cancelled") -> TaskStatus:
    """Cancel a task; return the status it had.

    A task no worker holds, or one claimed but not started, is `cancelled` at once. A running
    one (`processing`) is asked to stop: its worker hears at its next heartbeat, interrupts the
    lambda and records the attempt `cancelled`; until then it stays `processing`. Raises
    InvalidTransition for a finished task.
    """
    backend = backends.current()
    for _ in range(5):  # the consumer or a worker may move it between our read and our write
        status = backend.statuses([task_id]).get(task_id)
        if status is None:
            raise TaskEntity.DoesNotExist(f"no task {task_id}")
        if status is TaskStatus.PROCESSING:
            if TaskEntity.objects.filter(pk=task_id, status=status).update(
                    cancel_requested_at=now):
                return status
            continue
        if status not in states.CANCELLABLE | {TaskStatus.CLAIMED}:
            raise InvalidTransition(f"a task in status {status} cannot be cancelled: it finished")
        error = {"type": "Cancelled", "message": reason, "traceback": ""}
        if guarded.transition(task_id, expected=status, lease=None, target=TaskStatus.CANCELLED,
                              now=now, finished_at=now, last_error=error):
            return status
    raise InvalidTransition("the task kept changing; try again")


def stop_requested(task_ids: Iterable[int], unreached: set[int] | None = None) -> set[int]:
    """The running tasks among `task_ids` that a cancel asked to stop. With `unreached`, the
    tasks of a shard that cannot be reached join it (shards.each_part)."""
    def asked(part: list[int]) -> set[int]:
        return set(TaskEntity.objects.filter(pk__in=part, status=TaskStatus.PROCESSING,
                                             cancel_requested_at__isnull=False)
                   .values_list("pk", flat=True))

    return set().union(*shards.each_part(task_ids, int, asked, unreached))


def requeue(task_ids: Iterable[int], *, now: datetime,
            statuses: Iterable[TaskStatus] = (TaskStatus.DEAD,)) -> int:
    """Put finished tasks (by default dead ones) back to `new` with their attempts reset."""
    wanted = frozenset(statuses)
    for status in wanted:
        states.check_transition(status, TaskStatus.NEW)
    with shards.atomic():
        ids = backends.current().requeue(list(task_ids), wanted, now=now)
        for pk in ids:
            guarded.after_requeue(pk, now)
    return len(ids)


def run_now(task_ids: Iterable[int], *, now: datetime) -> int:
    """Make scheduled or retrying tasks due now."""
    with shards.atomic():
        return backends.current().run_now(list(task_ids), now=now)


def discard(task_ids: Iterable[int], *, statuses: Iterable[TaskStatus] = (TaskStatus.DEAD,)) -> int:
    """Delete finished tasks (by default dead ones) for good; return how many."""
    return backends.current().discard(list(task_ids), list(statuses))
