"""Retention: finished tasks older than ATF_RETENTION_S are deleted, a small batch at a time.

The consumer calls `prune_batch()` from its housekeeping; `manage.py atf_prune` loops over it.
Each batch is one short transaction that locks only the rows it deletes (SKIP LOCKED, so it
never waits for a requeue or a worker), and deletes their assoc rows, attempts and chain links
with them.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Q, QuerySet

from tasks_core import states
from tasks_core.conf import atf_settings
from tasks_core.models import (
    TaskAssoc,
    TaskAttempt,
    TaskDependency,
    TaskEntity,
    TaskProgress,
    TaskStep,
)

logger = logging.getLogger(__name__)


def prunable(*, now: datetime, older_than_s: float) -> QuerySet[TaskEntity]:
    """Finished tasks whose finished_at is more than `older_than_s` seconds before `now`."""
    cutoff = now - timedelta(seconds=older_than_s)
    return TaskEntity.objects.filter(status__in=list(states.FINAL), finished_at__lt=cutoff)


def prune_batch(*, now: datetime, batch_size: int = 1000,
                older_than_s: float | None = None) -> int:
    """Delete up to `batch_size` finished tasks older than the retention; return how many.

    `older_than_s` defaults to ATF_RETENTION_S; zero or less disables pruning.
    """
    age_s = atf_settings.retention_s if older_than_s is None else older_than_s
    if age_s <= 0 or batch_size <= 0:
        return 0
    with transaction.atomic():
        # The guard is re-checked under the lock: a task requeued meanwhile is not finished.
        ids = list(
            prunable(now=now, older_than_s=age_s)
            .select_for_update(skip_locked=True)
            .order_by()
            .values_list("pk", flat=True)[:batch_size]
        )
        if not ids:
            return 0
        # One plain DELETE per table: the ORM's cascade would fetch every row first.
        for rows in (
            TaskDependency.objects.filter(Q(parent_id__in=ids) | Q(child_id__in=ids)),
            TaskAttempt.objects.filter(task_id__in=ids),
            TaskStep.objects.filter(task_id__in=ids),
            TaskProgress.objects.filter(task_id__in=ids),
            TaskAssoc.objects.filter(task_id__in=ids),
        ):
            rows._raw_delete(rows.db)
        entities = TaskEntity.objects.filter(pk__in=ids)
        deleted = entities._raw_delete(entities.db)
    logger.debug("pruned %d finished task(s)", deleted, extra={"action": "tasks_pruned"})
    return deleted
