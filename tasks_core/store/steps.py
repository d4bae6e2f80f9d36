"""Steps that resume (`ctx.step`): a step's result recorded under the running attempt's lease.

The record is fenced like a finish: the task's row is locked and must still be `processing`
under the lease the attempt holds, so an attempt whose lease moved on (a stale worker, after
its task was taken from it) records nothing. A later attempt reads the recorded results back
and skips the steps that have one.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

from django.db import IntegrityError
from django.db.models import Sum

from tasks_core import shards
from tasks_core.conf import atf_settings
from tasks_core.models import TaskEntity, TaskStep
from tasks_core.states import TaskStatus


class StepRecord(enum.StrEnum):
    """What became of a step's result."""

    RECORDED = "recorded"
    LEASE_LOST = "lease_lost"  #: the attempt's lease moved on: nothing was written
    TOO_LARGE = "too_large"  #: the task's steps would pass ATF_MAX_RESULT_BYTES


@shards.by_task
def recorded_steps(task_id: int) -> dict[str, Any]:
    """The results of a task's recorded steps, by name."""
    return dict(TaskStep.objects.filter(task_id=task_id).values_list("name", "result"))


@shards.by_task
def record_step(task_id: int, lease: int, *, name: str, value: Any, size: int,
                now: datetime) -> StepRecord:
    """Record step `name` of a running task whose lease is `lease`; its result, `value`, is
    `size` bytes of JSON."""
    with shards.atomic():
        attempt = (TaskEntity.objects.select_for_update()
                   .filter(pk=task_id, lease=lease, status=TaskStatus.PROCESSING)
                   .values_list("attempts", flat=True).first())
        if attempt is None:
            return StepRecord.LEASE_LOST
        used = TaskStep.objects.filter(task_id=task_id).aggregate(used=Sum("size"))["used"]
        if (used or 0) + size > atf_settings.max_result_bytes:
            return StepRecord.TOO_LARGE
        try:
            with shards.atomic():
                TaskStep.objects.create(task_id=task_id, name=name, result=value, size=size,
                                        attempt=attempt, recorded_at=now)
        except IntegrityError:
            pass  # recorded already, by this attempt: the first result stands
    return StepRecord.RECORDED
