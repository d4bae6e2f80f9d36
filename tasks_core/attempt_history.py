"""A task's attempts as people read them: its attempt rows, and the one its own row holds.

Success is final, and a succeeded task's row says everything of its last attempt: who ran it
(`worker`), when the store started it (`started_at`) and when it ended (`finished_at`). So
finishing writes no attempt row for a success (a row and two index entries of WAL that every
drained task paid, and the attempt table's bulk), and every reader of a task's attempts (the
API, the console, the Django tasks backend) goes through here and sees that attempt as before.
A success finished before that has its row, and nothing is added for it.
"""

from __future__ import annotations

from collections.abc import Sequence

from tasks_core.models import TaskAttempt, TaskEntity
from tasks_core.states import TaskStatus


def implied(task: TaskEntity, newest: TaskAttempt | None) -> TaskAttempt | None:
    """The attempt `task`'s row holds that has no row of its own (a success's), numbered after
    `newest`, the task's newest attempt row (None: it has none); None when there is none."""
    if task.status != TaskStatus.SUCCESS or task.finished_at is None:
        return None
    if newest is not None and newest.outcome == TaskAttempt.Outcome.SUCCESS:
        return None  # written when successes still had rows
    return TaskAttempt(task=task, number=(newest.number if newest else 0) + 1,
                       worker=task.worker, started_at=task.started_at or task.finished_at,
                       ended_at=task.finished_at, outcome=TaskAttempt.Outcome.SUCCESS)


def newest_first(task: TaskEntity, rows: Sequence[TaskAttempt]) -> list[TaskAttempt]:
    """`rows` (the task's newest attempt rows, newest first) with the implied attempt in front."""
    extra = implied(task, rows[0] if rows else None)
    return [extra, *rows] if extra is not None else list(rows)


def count(task: TaskEntity) -> int:
    """How many attempts `task` has had in all."""
    rows = task.attempt_history.all()
    return rows.count() + (implied(task, rows.order_by("-number").first()) is not None)


def everything(task: TaskEntity) -> list[TaskAttempt]:
    """All of `task`'s attempts, oldest first."""
    return newest_first(task, list(task.attempt_history.order_by("-number")))[::-1]
