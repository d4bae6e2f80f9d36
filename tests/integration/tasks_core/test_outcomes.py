"""The rollup of finished outcomes: counts and throughput that never read the task history."""

from __future__ import annotations

import importlib
import math
import threading
from collections import Counter
from datetime import datetime, timedelta
from types import SimpleNamespace

import pytest
from django.apps import apps
from django.db import connection
from django.db.models import Count, F
from django.utils import timezone

from tasks_core import outcomes, retention, stats, store
from tasks_core.latency_buckets import Latencies
from tasks_core.models import (
    Lambda,
    LatencyMinute,
    OutcomeFold,
    OutcomeMinute,
    OutcomeTotal,
    TaskEntity,
)
from tasks_core.states import FINAL, TaskStatus
from tests.conftest import race
from tests.factories import LambdaFactory, TaskFactory

SETTLED = timedelta(seconds=outcomes.SETTLE_S + 1)


def finished(lam: Lambda, status: TaskStatus, at: datetime, count: int = 1) -> list[TaskEntity]:
    return [TaskFactory(lambda_ref=lam, status=status, finished_at=at) for _ in range(count)]


def real_counts() -> Counter[tuple[int, str]]:
    """(lambda id, status) -> finished tasks, counted from the rows."""
    rows = (TaskEntity.objects.filter(status__in=list(FINAL)).values_list("lambda_ref_id", "status")
            .annotate(n=Count("pk")).order_by())
    return Counter({(lambda_id, status): n for lambda_id, status, n in rows})


def rolled_up() -> Counter[tuple[int, str]]:
    """(lambda id, status) -> the rollup's totals alone (no tail of unfolded rows)."""
    return Counter({(lambda_id, status): n for lambda_id, status, n in
                    OutcomeTotal.objects.values_list("lambda_ref_id", "status", "finished")})


def fold_all(now: datetime) -> None:
    outcomes.fold(now=now, budget_s=math.inf)


@pytest.mark.sqlite
def test_the_rollup_counts_what_finished_across_several_folds(db: None) -> None:
    # Given tasks of two lambdas finishing in every final status over a few minutes
    start = (timezone.now() - timedelta(minutes=10)).replace(second=0, microsecond=0)
    one, two = LambdaFactory(), LambdaFactory()
    for minute, status in enumerate(sorted(FINAL)):
        finished(one, status, start + timedelta(minutes=minute, seconds=5), count=2)
        finished(two, status, start + timedelta(minutes=minute, seconds=40))
    # When the consumer folds three times while more tasks finish in between
    fold_all(start + timedelta(minutes=2) + SETTLED)
    finished(one, TaskStatus.SUCCESS, start + timedelta(minutes=6), count=3)
    fold_all(start + timedelta(minutes=4) + SETTLED)
    finished(two, TaskStatus.FATAL_FAILURE, start + timedelta(minutes=7))
    fold_all(timezone.now() + SETTLED)
    # Then the totals equal the rows, and each minute holds its own tasks
    assert rolled_up() == real_counts()
    assert sum(rolled_up().values()) == 19
    assert set(OutcomeMinute.objects.filter(minute=start)
               .values_list("lambda_ref_id", "status", "finished")) == {
        (one.pk, sorted(FINAL)[0], 2), (two.pk, sorted(FINAL)[0], 1)}
    # And folding again adds nothing
    fold_all(timezone.now() + SETTLED)
    assert rolled_up() == real_counts()


@pytest.mark.sqlite
def test_counts_and_throughput_come_from_the_rollup_not_the_history(db: None) -> None:
    # Given tasks that finished in two minutes of the last hour, folded
    now = timezone.now().replace(second=30, microsecond=0)
    lam = LambdaFactory()
    finished(lam, TaskStatus.SUCCESS, now - timedelta(minutes=20), count=3)
    finished(lam, TaskStatus.FATAL_FAILURE, now - timedelta(minutes=5), count=2)
    finished(lam, TaskStatus.CANCELLED, now - timedelta(minutes=5))
    fold_all(now)
    # When the history is gone (deleted behind the store's back)
    store.discard(list(TaskEntity.objects.values_list("pk", flat=True)), statuses=FINAL)
    assert not TaskEntity.objects.exists()
    # Then the counts and the throughput still show it
    counts = stats.status_counts_by_lambda()[lam.name]
    assert counts == {"success": 3, "fatal_failure": 2, "cancelled": 1}
    assert stats.throughput(since=now - timedelta(hours=1)) == [
        (now.replace(second=0) - timedelta(minutes=20), 3),
        (now.replace(second=0) - timedelta(minutes=5), 2)]


@pytest.mark.sqlite
def test_tasks_finished_since_the_last_fold_are_counted_from_their_rows(db: None) -> None:
    # Given a fold, then tasks that finished after it
    now = timezone.now()
    lam = LambdaFactory()
    finished(lam, TaskStatus.SUCCESS, now - timedelta(minutes=5), count=2)
    fold_all(now)
    finished(lam, TaskStatus.SUCCESS, now, count=4)
    # When counting before the next fold, Then both are there, once each
    assert stats.status_counts(lambda_ids=[lam.pk])["success"] == 6
    assert sum(n for _minute, n in stats.throughput(since=now - timedelta(minutes=10))) == 6


def test_two_consumers_folding_at_once_add_each_task_once(transactional_db: None) -> None:
    # Given tasks finished over many fold steps' worth of time, first attempts 0.5 s late
    lam = LambdaFactory()
    start = timezone.now() - timedelta(hours=1)
    for n in range(40):
        finished(lam, sorted(FINAL)[n % len(FINAL)], start + timedelta(seconds=20 * n), count=2)
    TaskEntity.objects.update(attempts=1, started_at=F("finished_at") - timedelta(seconds=1),
                              run_at=F("finished_at") - timedelta(seconds=1.5))
    now = timezone.now()

    def consumer() -> None:
        for _round in range(20):
            outcomes.fold(now=now, budget_s=0.0)  # one step a round, as a busy consumer would

    # When four consumers fold at once until caught up
    race(consumer, consumer, consumer, consumer)
    fold_all(now)
    # Then every task was added exactly once, to the counts and to the latencies
    assert OutcomeFold.objects.get().folded_until == now - timedelta(seconds=outcomes.SETTLE_S)
    assert rolled_up() == real_counts()
    assert sum(rolled_up().values()) == 80
    latencies = [Latencies.stored(buckets, sum_s) for buckets, sum_s in
                 LatencyMinute.objects.values_list("buckets", "sum_s")]
    assert sum(one.count for one in latencies) == 80
    assert sum(one.sum_s for one in latencies) == pytest.approx(40.0)


def test_pruning_leaves_the_finished_counts_as_they_were(db: None) -> None:
    # Given finished tasks past a one-hour retention and younger ones, counted
    now = timezone.now()
    lam = LambdaFactory()
    for status in sorted(FINAL):
        finished(lam, status, now - timedelta(hours=2), count=3)
        finished(lam, status, now - timedelta(minutes=10))
    fold_all(now)
    before = stats.status_counts(lambda_ids=[lam.pk])
    # When retention prunes the old ones
    assert retention.prune(now=now, budget_s=None, older_than_s=3600) == 15
    # Then the counts of outcomes stay; dead letters are counted from their rows, and so drop
    after = stats.status_counts(lambda_ids=[lam.pk])
    assert {s: after[s] for s in stats.ROLLED_UP} == {s: before[s] for s in stats.ROLLED_UP}
    assert before["success"] == 4
    assert (before["dead"], after["dead"]) == (4, 1)


def test_a_prune_leaves_tasks_the_rollup_does_not_count_yet(db: None) -> None:
    # Given old finished tasks and no fold yet
    now = timezone.now()
    finished(LambdaFactory(), TaskStatus.SUCCESS, now - timedelta(days=30), count=2)
    # When pruning without folding first, Then nothing goes
    assert retention.prune(now=now, budget_s=None, older_than_s=60) == 0
    # And after a fold both do
    fold_all(now)
    assert retention.prune(now=now, budget_s=None, older_than_s=60) == 2


@pytest.mark.sqlite
def test_the_dead_letter_count_drops_when_they_are_requeued_or_discarded(db: None) -> None:
    # Given three dead letters, folded
    now = timezone.now()
    lam = LambdaFactory()
    dead = finished(lam, TaskStatus.DEAD, now - timedelta(minutes=1), count=3)
    fold_all(now + SETTLED)
    assert stats.status_counts(lambda_ids=[lam.pk])["dead"] == 3
    # When one is requeued and one discarded
    store.requeue([dead[0].pk], now=now)
    store.discard([dead[1].pk])
    # Then one dead letter is left, and the requeued task counts as new
    counts = stats.status_counts(lambda_ids=[lam.pk])
    assert (counts["dead"], counts["new"]) == (1, 1)


def test_live_counts_read_only_the_index_ranges_of_their_statuses(db: None) -> None:
    # Given the query that counts live tasks and dead letters
    rows = (TaskEntity.objects.filter(status__in=[s.value for s in stats.COUNTED_FROM_ROWS])
            .order_by().values_list("lambda_ref_id", "status").annotate(n=Count("pk")))
    sql, params = rows.query.sql_with_params()
    # When PostgreSQL plans it without sequential scans
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(f"EXPLAIN {sql}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    # Then an index bounds the read to those statuses (the history is never read)
    assert "Index Cond: ((status)::text = ANY" in plan, plan
    assert "success" not in plan


@pytest.mark.sqlite
def test_the_migration_fills_the_rollup_from_the_finished_tasks(db: None) -> None:
    # Given finished tasks and an empty rollup
    now = timezone.now()
    lam = LambdaFactory()
    finished(lam, TaskStatus.SUCCESS, now - timedelta(days=3), count=2)
    finished(lam, TaskStatus.DROPPED, now - timedelta(minutes=3))
    TaskFactory(lambda_ref=lam)  # not finished
    migration = importlib.import_module("tasks_core.migrations.0018_outcome_rollup")
    # When migration 0018 fills it
    migration.fill_rollup(apps, SimpleNamespace(connection=connection))
    # Then the totals are the finished tasks', the recent minute is there, and folds go on
    # from where it stopped
    assert rolled_up() == real_counts() == Counter({(lam.pk, "success"): 2, (lam.pk, "dropped"): 1})
    assert list(OutcomeMinute.objects.values_list("status", "finished")) == [("dropped", 1)]
    assert OutcomeFold.objects.get().folded_until > now - SETTLED


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("read", ["status counts", "throughput", "latencies"])
def test_a_fold_that_commits_between_a_readers_statements_is_counted_once(
        read: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given five first attempts that finished a minute ago, not folded yet
    lam = LambdaFactory()
    at = timezone.now() - timedelta(minutes=1)
    for _ in range(5):
        TaskFactory(lambda_ref=lam, status=TaskStatus.SUCCESS, finished_at=at, attempts=1,
                    started_at=at - timedelta(seconds=1), run_at=at - timedelta(seconds=2))
    # When a consumer's fold commits right after a reader has read where the rollup ends
    read_mark = outcomes.folded_until

    def mark_then_a_fold_elsewhere() -> datetime | None:
        mark = read_mark()
        folding = threading.Thread(target=fold_on_its_own_connection)
        folding.start()
        folding.join()
        return mark

    monkeypatch.setattr(outcomes, "folded_until", mark_then_a_fold_elsewhere)
    since = timezone.now() - timedelta(minutes=5)
    if read == "status counts":
        counted = stats.status_counts(lambda_ids=[lam.pk])["success"]
    elif read == "throughput":
        counted = sum(outcomes.finished_per_minute(since=since, lambda_ids=[lam.pk]).values())
    else:
        counted = outcomes.latencies_since(since=since, lambda_ids=[lam.pk]).count
    # Then the reader counts each task once (the rollup and the rows after the old mark would
    # both hold them without one snapshot), and the fold did commit
    assert counted == 5
    assert rolled_up()[lam.pk, TaskStatus.SUCCESS.value] == 5


def fold_on_its_own_connection() -> None:
    try:
        fold_all(timezone.now())
    finally:
        connection.close()  # this thread's
