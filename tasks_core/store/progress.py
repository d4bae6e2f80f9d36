"""Progress a running task reports (`ctx.progress`): one upsert of its progress row."""

from __future__ import annotations

from datetime import datetime

from tasks_core import shards
from tasks_core.models import TaskProgress

#: Characters of a progress note that are kept.
NOTE_CHARS = 200


@shards.by_task
def report(task_id: int, *, done: float, total: float | None, note: str,
           now: datetime) -> None:
    """Write a task's progress: one statement (an insert that updates the row it meets)."""
    TaskProgress.objects.bulk_create(
        [TaskProgress(task_id=task_id, done=done, total=total, note=note[:NOTE_CHARS],
                      updated_at=now)],
        update_conflicts=True, unique_fields=["task"],
        update_fields=["done", "total", "note", "updated_at"])
