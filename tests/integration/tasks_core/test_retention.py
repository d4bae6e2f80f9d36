"""Retention: finished tasks older than ATF_RETENTION_S are pruned in batches; nothing else is."""

from __future__ import annotations

import logging
import math
import time
from datetime import datetime, timedelta
from typing import Any

from django.db import connection
from django.utils import timezone

from tasks_core import outcomes, retention, store
from tasks_core.models import Lambda, TaskAssoc, TaskAttempt, TaskDependency, TaskEntity
from tasks_core.states import FINAL, TaskStatus
from tests.factories import LambdaFactory, TaskFactory

logger = logging.getLogger(__name__)

WEEK = timedelta(days=7)


def bulk_tasks(lam: Lambda, *, count: int, statuses: list[TaskStatus],
               finished_at: datetime | None) -> None:
    """Insert `count` tasks (statuses in turn) with their assoc rows, in two SQL statements."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO tasks_core_taskentity (lambda_ref_id, collection, priority, payload,
                status, attempts, max_attempts, run_at, lease, worker, created_at, finished_at)
            SELECT %s, 'default', 'default', '{}'::jsonb, (%s::text[])[1 + n %% %s], 1, 3,
                   %s, 0, '', %s, %s
            FROM generate_series(1, %s) AS n
            """,
            [lam.pk, [str(s) for s in statuses], len(statuses), finished_at or timezone.now(),
             finished_at or timezone.now(), finished_at, count],
        )
        cursor.execute(
            """
            INSERT INTO tasks_core_taskassoc (task_id, lambda_ref_id, collection, priority,
                status, next_trigger_at, shard)
            SELECT e.id, e.lambda_ref_id, e.collection, e.priority,
                   CASE WHEN e.status = ANY(%s) THEN 'completed' ELSE 'new' END,
                   CASE WHEN e.status = ANY(%s) THEN NULL ELSE e.run_at END, e.id %% 256
            FROM tasks_core_taskentity e
            LEFT JOIN tasks_core_taskassoc a ON a.task_id = e.id
            WHERE a.task_id IS NULL
            """,
            [[str(s) for s in FINAL], [str(s) for s in FINAL]],
        )


def test_pruning_20000_finished_tasks_leaves_the_others_untouched(db: None) -> None:
    # Given 20,000 tasks that finished two weeks ago, in every final status (the pruning rate
    # at volume is the bench's: docs/benchmarks.md)
    now = timezone.now()
    lam = LambdaFactory()
    bulk_tasks(lam, count=20_000, statuses=sorted(FINAL), finished_at=now - 2 * WEEK)
    # And tasks that must stay: unfinished ones, and finished ones younger than the retention
    unfinished = sorted(set(TaskStatus) - FINAL)
    bulk_tasks(lam, count=1_000, statuses=unfinished, finished_at=None)
    bulk_tasks(lam, count=500, statuses=sorted(FINAL), finished_at=now - timedelta(days=1))
    kept = set(TaskEntity.objects.filter(finished_at__gte=now - WEEK).values_list("pk", flat=True)
               ) | set(TaskEntity.objects.filter(finished_at=None).values_list("pk", flat=True))
    assert len(kept) == 1_500
    # When the consumer folds them into the rollup of outcomes, then prunes batch after batch
    # with the default retention (7 days)
    outcomes.fold(now=now, budget_s=math.inf)
    started = time.monotonic()
    batches, pruned = 0, 0
    while deleted := retention.prune_batch(now=now, batch_size=1000):
        batches += 1
        pruned += deleted
    elapsed_s = time.monotonic() - started
    logger.warning("pruned %d tasks in %d batches in %.1fs", pruned, batches, elapsed_s)
    # Then exactly the old finished tasks are gone, with their assoc rows
    assert (pruned, batches) == (20_000, 20)
    assert set(TaskEntity.objects.values_list("pk", flat=True)) == kept
    assert set(TaskAssoc.objects.values_list("task_id", flat=True)) == kept
    statuses = set(TaskEntity.objects.filter(finished_at=None).values_list("status", flat=True))
    assert statuses == {str(s) for s in unfinished}


def test_pruned_tasks_take_their_attempts_and_chain_links_along(db: None) -> None:
    # Given an old finished parent with an attempt, whose child is still waiting on another one
    now = timezone.now()
    old = now - 2 * WEEK
    parent = TaskFactory(status=TaskStatus.SUCCESS, finished_at=old)
    TaskAttempt.objects.create(task=parent, number=1, started_at=old, ended_at=old,
                               outcome=TaskAttempt.Outcome.SUCCESS)
    other = TaskFactory(lambda_ref=parent.lambda_ref)
    child = store.create([store.NewTask(
        lambda_id=parent.lambda_ref_id, collection="default", priority="default", payload={},
        run_at=now, max_attempts=3, parents=(parent.pk, other.pk),
    )], now=now)[0]
    # When pruning
    outcomes.fold(now=now, budget_s=math.inf)
    assert retention.prune_batch(now=now) == 1
    # Then the parent, its attempt and its link are gone; the child still waits for `other`
    assert not TaskEntity.objects.filter(pk=parent.pk).exists()
    assert not TaskAttempt.objects.exists()
    assert list(TaskDependency.objects.values_list("parent_id", "child_id")) == [
        (other.pk, child.pk)]
    assert TaskEntity.objects.get(pk=child.pk).status == TaskStatus.WAITING


def test_a_zero_retention_keeps_everything(db: None, settings: Any) -> None:
    settings.ATF_RETENTION_S = 0
    TaskFactory(status=TaskStatus.DEAD, finished_at=timezone.now() - 100 * WEEK)
    assert retention.prune_batch(now=timezone.now()) == 0
    assert TaskEntity.objects.count() == 1


def test_the_retention_setting_is_the_default_age(db: None, settings: Any) -> None:
    # Given a one-hour retention and tasks finished 2 h and 10 min ago
    settings.ATF_RETENTION_S = 3600
    now = timezone.now()
    old = TaskFactory(status=TaskStatus.SUCCESS, finished_at=now - timedelta(hours=2))
    young = TaskFactory(status=TaskStatus.SUCCESS, finished_at=now - timedelta(minutes=10))
    # When pruning, Then only the older one goes
    outcomes.fold(now=now, budget_s=math.inf)
    assert retention.prune_batch(now=now) == 1
    assert not TaskEntity.objects.filter(pk=old.pk).exists()
    assert list(TaskEntity.objects.values_list("pk", flat=True)) == [young.pk]


def test_a_round_prunes_a_backlog_of_many_batches_within_its_budget(db: None) -> None:
    # Given 5,000 tasks past the retention, ten batches of 500, counted in the rollup
    now = timezone.now()
    bulk_tasks(LambdaFactory(), count=5_000, statuses=[TaskStatus.SUCCESS],
               finished_at=now - 2 * WEEK)
    outcomes.fold(now=now, budget_s=math.inf)
    # When one housekeeping round prunes with a budget that its batches fit in
    started = time.monotonic()
    pruned = retention.prune(now=now, budget_s=30.0, batch_size=500)
    elapsed_s = time.monotonic() - started
    # Then the whole backlog is gone in that round, batch after batch
    assert pruned == 5_000
    assert not TaskEntity.objects.exists()
    logger.warning("pruned 5,000 tasks in batches of 500 in %.2fs", elapsed_s)


def test_a_spent_budget_ends_the_round_after_the_batch_in_progress(db: None) -> None:
    # Given 1,500 tasks past the retention
    now = timezone.now()
    bulk_tasks(LambdaFactory(), count=1_500, statuses=[TaskStatus.DEAD],
               finished_at=now - 2 * WEEK)
    outcomes.fold(now=now, budget_s=math.inf)
    # When a round has no time to spare, Then it prunes one batch and leaves the rest
    assert retention.prune(now=now, budget_s=0.0, batch_size=500) == 500
    assert TaskEntity.objects.count() == 1_000
