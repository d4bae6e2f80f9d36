"""Retention: finished tasks older than ATF_RETENTION_S are deleted, batch after batch.

The consumer calls `prune()` from its housekeeping: batches until none is left or its time
budget is spent; while a round ends with tasks still `behind()`, the consumer prunes another
round after each pass instead of sleeping, until it has caught up, so that retention keeps up
with any drain rate without holding its passes back by more than one budget;
`manage.py atf_prune` runs it without a budget. Each batch is one short
transaction that locks only the rows it deletes (SKIP LOCKED: it never waits for a requeue or
a worker, and consumers pruning at once take different rows), and deletes their assoc rows,
attempts and chain links with them. Only tasks the rollup of outcomes already counts are
deleted (tasks_core.outcomes), so a prune never lowers a finished count.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from django.db.models import Q, QuerySet

from tasks_core import outcomes, shards, states
from tasks_core.conf import atf_settings
from tasks_core.models import (
    TaskAssoc,
    TaskAttempt,
    TaskDependency,
    TaskEntity,
    TaskProgress,
    TaskStep,
    TaskTrace,
)

logger = logging.getLogger(__name__)


#: Seconds of pruning per consumer housekeeping round at most.
PRUNE_BUDGET_S = 0.3


def prunable(*, now: datetime, older_than_s: float) -> QuerySet[TaskEntity]:
    """Finished tasks whose finished_at is more than `older_than_s` seconds before `now`, and
    that the rollup of outcomes counts already (none before its first fold)."""
    folded_until = outcomes.folded_until()
    if folded_until is None:
        return TaskEntity.objects.none()
    cutoff = min(now - timedelta(seconds=older_than_s), folded_until)
    return TaskEntity.objects.filter(status__in=list(states.FINAL), finished_at__lt=cutoff)


def behind(*, now: datetime) -> bool:
    """Whether a finished task past ATF_RETENTION_S is still to prune (one index probe)."""
    age_s = atf_settings.retention_s
    return age_s > 0 and prunable(now=now, older_than_s=age_s).exists()


def prune(*, now: datetime, budget_s: float | None, batch_size: int = 1000,
          older_than_s: float | None = None) -> int:
    """Delete finished tasks past the retention batch after batch, until none is left or
    `budget_s` seconds are spent (None: no limit); return how many were deleted. (Fold first:
    tasks the rollup does not count yet stay.)"""
    return in_batches(lambda: prune_batch(now=now, batch_size=batch_size,
                                          older_than_s=older_than_s),
                      batch_size=batch_size, budget_s=budget_s)


def in_batches(batch: Callable[[], int], *, batch_size: int, budget_s: float | None) -> int:
    """Call `batch` (it deletes up to `batch_size` rows, and says how many) until it deletes
    fewer than that, or `budget_s` seconds are spent (None: no limit); the total deleted."""
    deadline_s = None if budget_s is None else time.monotonic() + budget_s
    deleted = 0
    while done := batch():
        deleted += done
        if done < batch_size or (deadline_s is not None and time.monotonic() >= deadline_s):
            break
    return deleted


def prune_batch(*, now: datetime, batch_size: int = 1000,
                older_than_s: float | None = None) -> int:
    """Delete up to `batch_size` finished tasks older than the retention; return how many.

    `older_than_s` defaults to ATF_RETENTION_S; zero or less disables pruning.
    """
    age_s = atf_settings.retention_s if older_than_s is None else older_than_s
    if age_s <= 0 or batch_size <= 0:
        return 0
    with shards.atomic():
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
            TaskTrace.objects.filter(task_id__in=ids),
            TaskAssoc.objects.filter(task_id__in=ids),
        ):
            rows._raw_delete(rows.db)
        entities = TaskEntity.objects.filter(pk__in=ids)
        deleted = entities._raw_delete(entities.db)
    logger.debug("pruned %d finished task(s)", deleted, extra={"action": "tasks_pruned"})
    return deleted
