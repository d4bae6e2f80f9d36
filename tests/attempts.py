"""Attempts as the tests read them: as every reader of a task's attempts sees them."""

from __future__ import annotations

from tasks_core import attempt_history
from tasks_core.models import TaskAttempt, TaskEntity


def attempts_of(task_id: int) -> list[TaskAttempt]:
    """Every attempt at a task, oldest first (a success has no row of its own:
    tasks_core.attempt_history)."""
    return attempt_history.everything(TaskEntity.objects.get(pk=task_id))
