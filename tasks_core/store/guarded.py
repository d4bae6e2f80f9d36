"""One guarded transition, and what it sets off in a chain."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from tasks_core import shards, states, wakeup
from tasks_core.models import TaskGroup
from tasks_core.states import TaskStatus
from tasks_core.store import backends, decisions, groups, timeouts
from tasks_core.store.decisions import ChildStep


def transition(task_id: int, *, expected: TaskStatus, lease: int | None, target: TaskStatus,
               now: datetime, delay_s: float | None = None, lambda_id: int | None = None,
               **changes: Any) -> bool:
    """Move a task from `expected` to `target` if its lease still matches; else return False.

    `lease=None` skips the lease check (user actions such as cancel, which guard on status).
    The entity's guarded UPDATE is the compare-and-set; the assoc row follows it in the same
    transaction. Callers that know the task's lambda pass `lambda_id` and save a read.
    """
    states.check_transition(expected, target)
    backend = backends.current()
    run_at = changes.get("run_at")
    if lambda_id is None or (target is TaskStatus.NEW and run_at is None):
        stored_lambda, stored_run_at = backend.lambda_and_run_at(task_id)
        lambda_id = stored_lambda if lambda_id is None else lambda_id
        run_at = run_at or stored_run_at
    assoc = timeouts.assoc(target, lambda_id, now, run_at=run_at, delay_s=delay_s)
    with shards.atomic(savepoint=False):
        if not backend.transition(task_id, expected=expected, lease=lease, target=target,
                                  changes=changes, assoc=assoc):
            return False
        after_final(task_id, target, now)
    return True


def after_final(task_id: int, status: TaskStatus, now: datetime) -> None:
    """Wake a finished task's waiting children, or cancel them if it did not succeed; count
    its end on its group, if it is a member of one."""
    if status not in states.FINAL:
        return
    wake_children(task_id, status, now)
    if (group_id := backends.current().group_of(task_id)) is not None:
        members_ended([(group_id, status)], now)


def wake_children(task_id: int, status: TaskStatus, now: datetime) -> None:
    """Wake a finished task's waiting children, or cancel them if it did not succeed."""
    backend = backends.current()
    child_ids = backend.children(task_id)
    if not child_ids:
        return
    if decisions.child_step(status) is ChildStep.CANCEL:
        error = decisions.parent_failed(task_id, status)
        for child in child_ids:
            transition(child, expected=TaskStatus.WAITING, lease=None,
                       target=TaskStatus.CANCELLED, now=now, finished_at=now, last_error=error)
        return
    waiting = [pk for pk, child_status in backend.statuses(child_ids).items()
               if child_status is TaskStatus.WAITING]
    for child in waiting:
        if decisions.child_step(status, backend.parent_statuses(child)) is ChildStep.WAKE:
            wake(child, now)


def wake(task_id: int, now: datetime) -> bool:
    """waiting -> new, due at its run_at or now, whichever is later; whether it moved."""
    run_at = max(now, backends.current().lambda_and_run_at(task_id)[1])
    if not transition(task_id, expected=TaskStatus.WAITING, lease=None, target=TaskStatus.NEW,
                      now=now, run_at=run_at):
        return False
    if run_at <= now:
        shards.on_commit(wakeup.notify)  # due now: the consumer need not poll
    return True


def after_requeue(task_id: int, now: datetime) -> None:
    """A requeued parent revives the children its failure cancelled: they wait again.

    A child with another parent that is still failed stays cancelled.
    """
    backend = backends.current()
    for child in backend.children(task_id):
        if not decisions.revives(backend.parent_statuses(child)):
            continue
        states.check_transition(TaskStatus.CANCELLED, TaskStatus.WAITING)
        if backend.revive(child):
            after_requeue(child, now)


def members_ended(ends: Iterable[tuple[int, TaskStatus]], now: datetime) -> None:
    """Count members' ends, (group id, status) each, on their groups, inside the caller's
    transaction (store.groups), and release the callback of each group they completed."""
    for group in groups.members_ended(ends, now):
        release(group, now)


#: The last_error of the callback that a group's end leaves out.
NOT_NEEDED = {
    TaskGroup.Status.SUCCEEDED: {"type": "GroupSucceeded", "traceback": "",
                                 "message": "every member succeeded: on_failure does not run"},
    TaskGroup.Status.FAILED: {"type": "GroupFailed", "traceback": "",
                              "message": "a member did not succeed: then does not run"},
}


def release(group: TaskGroup, now: datetime) -> None:
    """Run the callback a group's end calls for (`then` or `on_failure`); the other one ends
    `cancelled`, saying why."""
    succeeded = group.status == TaskGroup.Status.SUCCEEDED
    run, skip = (group.then_id, group.on_failure_id) if succeeded \
        else (group.on_failure_id, group.then_id)
    if run is not None:
        wake(run, now)
    if skip is not None:
        transition(skip, expected=TaskStatus.WAITING, lease=None, target=TaskStatus.CANCELLED,
                   now=now, finished_at=now,
                   last_error=NOT_NEEDED[TaskGroup.Status(group.status)])
