"""Delivery latencies in the rollup of outcomes: folded once with the counts, read back as
percentiles within the buckets' error of the exact ones, without reading the task history.
(Folds that race, and a fold between a reader's statements: in test_outcomes.py.)"""

from __future__ import annotations

import importlib
import math
import random
from datetime import datetime, timedelta
from types import SimpleNamespace

import pytest
from django.apps import apps
from django.db import connection
from django.utils import timezone

from tasks_console import latency
from tasks_core import outcomes, stats
from tasks_core.latency_buckets import ERROR, ZERO_S
from tasks_core.models import Lambda, LatencyMinute, TaskEntity
from tasks_core.states import TaskStatus
from tests.factories import LambdaFactory, TaskFactory
from tests.unit.test_latency_buckets import percentile_cont

SETTLED = timedelta(seconds=outcomes.SETTLE_S + 1)


def started(lam: Lambda, *, latency_s: float, at: datetime, ran_s: float = 1.0,
            status: TaskStatus = TaskStatus.SUCCESS, attempts: int = 1) -> TaskEntity:
    """A task whose attempt started `latency_s` after it was due, at `at`, and (unless it is
    still processing) finished `ran_s` later."""
    finished = None if status == TaskStatus.PROCESSING else at + timedelta(seconds=ran_s)
    return TaskFactory(lambda_ref=lam, status=status, attempts=attempts,
                       run_at=at - timedelta(seconds=latency_s), started_at=at,
                       finished_at=finished)


def fold_all(now: datetime) -> None:
    outcomes.fold(now=now, budget_s=math.inf)


def folded_count() -> int:
    return sum(sum(buckets.values()) for buckets in
               LatencyMinute.objects.values_list("buckets", flat=True))


@pytest.mark.sqlite
def test_percentiles_from_fold_and_tail_are_within_the_bucket_error_of_the_exact_ones(
        db: None) -> None:
    # Given 300 first attempts over the last 40 minutes with log-normal latencies, a retry
    # (left out) and two first attempts still running
    now = timezone.now()
    lam = LambdaFactory()
    rng = random.Random(33)
    latencies = [rng.lognormvariate(math.log(0.2), 1.2) for _ in range(300)]
    for n, latency_s in enumerate(latencies):
        started(lam, latency_s=latency_s, at=now - timedelta(seconds=2400 - 8 * n))
    started(lam, latency_s=500.0, at=now - timedelta(minutes=3), attempts=2)
    for latency_s in (0.3, 0.4):
        started(lam, latency_s=latency_s, at=now - timedelta(seconds=5),
                status=TaskStatus.PROCESSING)
    latencies += [0.3, 0.4]
    # When the older half is folded (the rest is the tail of unfolded rows)
    fold_all(now - timedelta(minutes=20))
    assert 0 < folded_count() < 300
    read = stats.delivery_latency(since=now - timedelta(hours=1), lambda_ids=[lam.pk])
    # Then the count is exact and each percentile within the buckets' error of percentile_cont
    assert read.count == 302
    for q, value in ((0.5, read.p50_s), (0.95, read.p95_s), (0.99, read.p99_s)):
        assert value == pytest.approx(percentile_cont(latencies, q), rel=ERROR, abs=ZERO_S)


@pytest.mark.sqlite
def test_a_task_is_counted_once_before_during_and_after_its_fold(db: None) -> None:
    # Given first attempts finishing across several fold steps, one of them still running
    now = timezone.now()
    lam = LambdaFactory()
    for n in range(12):
        started(lam, latency_s=0.1 * (n + 1), at=now - timedelta(minutes=10) + timedelta(
            seconds=40 * n))
    running = started(lam, latency_s=2.0, at=now - timedelta(seconds=30),
                      status=TaskStatus.PROCESSING)
    since = now - timedelta(minutes=15)

    def counted() -> int:
        return outcomes.latencies_since(since=since, lambda_ids=[lam.pk]).count

    # When folding step by step up to now, Then every read counts 13 tasks
    assert counted() == 13
    for minutes_ago in (8, 5, 2, 0):
        fold_all(now - timedelta(minutes=minutes_ago))
        assert counted() == 13
    assert folded_count() == 12
    # And once the running one finished and was folded, the fold holds it once too
    TaskEntity.objects.filter(pk=running.pk).update(status=TaskStatus.SUCCESS, finished_at=now)
    assert counted() == 13
    fold_all(now + SETTLED)
    assert (counted(), folded_count()) == (13, 13)
    fold_all(now + 2 * SETTLED)
    assert folded_count() == 13


@pytest.mark.sqlite
def test_each_team_reads_the_latencies_of_its_own_lambdas(db: None) -> None:
    # Given two lambdas' tasks, one late by 1 s and one by 30 s, folded and not
    now = timezone.now()
    ours, theirs = LambdaFactory(), LambdaFactory()
    for at in (now - timedelta(minutes=10), now - timedelta(seconds=5)):
        started(ours, latency_s=1.0, at=at)
        started(theirs, latency_s=30.0, at=at)
    fold_all(now - timedelta(minutes=1))
    # When one lambda's latencies are read, Then only its tasks are
    since = now - timedelta(hours=1)
    read = stats.delivery_latency(since=since, lambda_ids=[ours.pk])
    assert read.count == 2
    assert read.p99_s == pytest.approx(1.0, rel=ERROR)
    assert stats.delivery_latency(since=since, lambda_ids=[]).count == 0
    assert stats.delivery_latency(since=since).count == 4


@pytest.mark.sqlite
def test_the_dashboards_minutes_agree_with_the_exact_percentiles(db: None) -> None:
    # Given two minutes with started first attempts, one folded, one not
    now = timezone.now().replace(second=30, microsecond=0)
    lam = LambdaFactory()
    older = [0.2, 0.3, 0.4, 2.0]
    newer = [0.05, 0.06, 0.9]
    for latency_s in older:
        started(lam, latency_s=latency_s, at=now - timedelta(minutes=30))
    for latency_s in newer:
        started(lam, latency_s=latency_s, at=now - timedelta(seconds=20))
    fold_all(now - timedelta(minutes=10))
    # When the dashboard's latency cards and chart are read
    overall, minutes = latency.window(since=now - timedelta(hours=1), lambda_ids=[lam.pk])
    # Then the cards' percentiles are the hour's, within the buckets' error of the exact ones
    assert overall.count == 7
    assert overall.p50_s == pytest.approx(percentile_cont(older + newer, 0.5), rel=ERROR)
    assert overall.p95_s == pytest.approx(percentile_cont(older + newer, 0.95), rel=ERROR)
    # And the chart has one point per minute, each within the buckets' error of the exact one
    assert sorted(minutes) == [(now - timedelta(minutes=30)).replace(second=0),
                               (now - timedelta(seconds=20)).replace(second=0)]
    for minute, values in zip(sorted(minutes), (older, newer), strict=True):
        p50, p95 = minutes[minute]
        assert p50 == pytest.approx(percentile_cont(values, 0.5), rel=ERROR)
        assert p95 == pytest.approx(percentile_cont(values, 0.95), rel=ERROR)


@pytest.mark.sqlite
def test_latency_minutes_are_pruned_with_the_outcome_minutes(db: None) -> None:
    # Given a task that started two days ago, folded
    now = timezone.now()
    started(LambdaFactory(), latency_s=1.0, at=now - timedelta(days=2))
    fold_all(now - timedelta(days=1, hours=23))
    assert LatencyMinute.objects.count() == 1
    # When a fold runs past the minutes kept, Then its row goes
    fold_all(now)
    assert not LatencyMinute.objects.exists()


@pytest.mark.sqlite
def test_the_migration_fills_the_latencies_the_rollup_already_holds(db: None) -> None:
    # Given first attempts folded before the latency rollup existed, and one after the mark
    now = timezone.now()
    lam = LambdaFactory()
    started(lam, latency_s=1.0, at=now - timedelta(minutes=30))
    started(lam, latency_s=3.0, at=now - timedelta(minutes=29))
    started(lam, latency_s=5.0, at=now - timedelta(days=3))  # older than the minutes kept
    fold_all(now - timedelta(minutes=5))
    started(lam, latency_s=9.0, at=now - timedelta(minutes=1))
    LatencyMinute.objects.all().delete()
    migration = importlib.import_module("tasks_core.migrations.0031_latency_rollup")
    # When migration 0031 fills them
    migration.fill_latencies(apps, SimpleNamespace(connection=connection))
    # Then the two recent folded tasks are in their minutes; the read adds the unfolded one
    assert folded_count() == 2
    read = outcomes.latencies_since(since=now - timedelta(hours=1), lambda_ids=[lam.pk])
    assert read.count == 3
    assert read.sum_s == pytest.approx(13.0)
