"""Read-only statistics of the task store and the queues, shared by the API, console and metrics.

Everything is counted in the database where it can be, and nothing reads the whole history:
live tasks and dead letters are counted from their rows, the other finished tasks and the
throughput from the rollup of outcomes (tasks_core.outcomes). "Delivery latency" is
`started_at - run_at` of the first attempt of tasks that started within the window (from the
minute that holds its start): how late a task began after it was due (retries, whose start
includes a backoff, are left out). Its percentiles and histogram come from the rollup's
per-minute latency buckets too, so they are estimates within tasks_core.latency_buckets.ERROR.
Recent-window queries go through the (status, finished_at) index.
"""

from __future__ import annotations

import itertools
import logging
from collections import Counter, defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Count, QuerySet

from tasks_core import liveness, outcomes, queues, shards
from tasks_core.conf import atf_settings
from tasks_core.exceptions import QueueUnavailable
from tasks_core.latency_buckets import Latencies
from tasks_core.models import Lambda, TaskEntity
from tasks_core.states import COUNTED_FROM_ROWS, FINAL, TaskStatus

logger = logging.getLogger(__name__)

#: Upper bounds (seconds) of the delivery-latency histogram buckets.
LATENCY_BUCKETS_S: tuple[float, ...] = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                                        300.0)
#: Statuses that count as failures.
FAILED = frozenset({TaskStatus.FATAL_FAILURE, TaskStatus.DEAD})
#: Statuses that count as finished work in the throughput.
DONE = frozenset({TaskStatus.SUCCESS, TaskStatus.FATAL_FAILURE, TaskStatus.DEAD})
#: Final statuses counted from the rollup of outcomes rather than from the task rows.
ROLLED_UP = FINAL - COUNTED_FROM_ROWS


@dataclass(frozen=True, kw_only=True)
class Latency:
    """Delivery-latency percentiles in seconds (None when no task started in the window)."""

    count: int
    p50_s: float | None
    p95_s: float | None
    p99_s: float | None


@dataclass(frozen=True, kw_only=True)
class Histogram:
    """Cumulative counts of delivery latencies: `buckets[i]` tasks took at most `bounds[i]` s."""

    bounds: tuple[float, ...]
    buckets: tuple[int, ...]
    count: int
    sum_s: float


@dataclass(frozen=True, kw_only=True)
class Snapshot:
    """Everything the dashboard, `/api/v1/stats/` and `atf_status` show, at `now`."""

    now: datetime
    window_s: float
    counts: dict[str, int]
    counts_by_lambda: dict[str, dict[str, int]]
    #: lambda -> priority -> messages waiting; None when the queue service is unreachable.
    queue_depths: dict[str, dict[str, int]] | None
    #: (minute, tasks finished in it) for each minute of the window that finished any.
    throughput: list[tuple[datetime, int]]
    latency: Latency
    failures_by_lambda: dict[str, int]
    live_workers: int
    per_minute: float = field(init=False)

    def __post_init__(self) -> None:
        finished = sum(n for _minute, n in self.throughput)
        object.__setattr__(self, "per_minute", finished / max(self.window_s / 60.0, 1e-9))


def _tasks(lambda_ids: Collection[int] | None) -> QuerySet[TaskEntity]:
    tasks = TaskEntity.objects.all()
    if lambda_ids is not None:
        tasks = tasks.filter(lambda_ref_id__in=list(lambda_ids))
    return tasks


@shards.across(shards.added)
def _counts(lambda_ids: Collection[int] | None) -> Counter[tuple[int, str]]:
    """(lambda id, status) -> tasks: live tasks and dead letters counted from their rows (one
    range of the task_lambda_status index per lambda and status: the history is not read),
    the other final statuses from the rollup of outcomes (every task that ever reached them,
    however many were pruned since). One snapshot: a fold that commits between the reads would
    otherwise count its tasks both in the rollup and in the rows after its old mark."""
    with shards.one_snapshot():
        return _counts_here(lambda_ids)


def _counts_here(lambda_ids: Collection[int] | None) -> Counter[tuple[int, str]]:
    # Every lambda named when none is given: the ranges of (lambda, status) in
    # task_lambda_status are what is read (no index of every status across lambdas).
    every = lambda_ids if lambda_ids is not None else Lambda.objects.values_list("pk", flat=True)
    rows = (_tasks(every).filter(status__in=[s.value for s in COUNTED_FROM_ROWS])
            .order_by().values_list("lambda_ref_id", "status").annotate(n=Count("pk")))
    counts: Counter[tuple[int, str]] = Counter(
        {(lambda_id, status): n for lambda_id, status, n in rows})
    counts.update(outcomes.finished_by_lambda(statuses=ROLLED_UP, lambda_ids=lambda_ids))
    return counts


def status_counts(*, lambda_ids: Collection[int] | None = None) -> dict[str, int]:
    """Tasks per status (every status present, zero when none); see `_counts`."""
    counts = {status.value: 0 for status in TaskStatus}
    for (_lambda_id, status), n in _counts(lambda_ids).items():
        counts[status] += n
    return counts


def status_counts_by_lambda(*, lambda_ids: Collection[int] | None = None,
                            ) -> dict[str, dict[str, int]]:
    """lambda name -> status -> tasks, for the lambdas that have any (see `_counts`)."""
    counted = _counts(lambda_ids)
    names = dict(Lambda.objects.filter(pk__in={lambda_id for lambda_id, _status in counted})
                 .values_list("pk", "name"))
    counts: dict[str, dict[str, int]] = defaultdict(dict)
    for (lambda_id, status), n in counted.items():
        if n:
            counts[names[lambda_id]][status] = n
    return dict(counts)


def queue_depths(lambda_names: Sequence[str], *,
                 backend: queues.QueueBackend | None = None) -> dict[str, dict[str, int]]:
    """lambda -> priority -> messages waiting in its queues (every shard's together), asked
    of the queue service in one call. Raises QueueUnavailable."""
    owned = backend is None
    backend = backend or queues.backend()
    pairs = [(name, priority) for name in lambda_names for priority in atf_settings.priorities]
    queues_of = [backend.shard_queues(name, priority, len(shards.aliases()))
                 for name, priority in pairs]
    try:
        found = iter(backend.depths([queue for names in queues_of for queue in names]))
    finally:
        if owned:
            backend.close()
    depths: dict[str, dict[str, int]] = defaultdict(dict)
    for (name, priority), names in zip(pairs, queues_of, strict=True):
        depths[name][priority] = sum(itertools.islice(found, len(names)))
    return dict(depths)


def throughput(*, since: datetime, lambda_ids: Collection[int] | None = None,
               ) -> list[tuple[datetime, int]]:
    """(minute, tasks that finished success/fatal/dead in it) from the minute of `since` on,
    oldest first, read from the rollup of outcomes."""
    per_minute = outcomes.finished_per_minute(since=since, statuses=DONE, lambda_ids=lambda_ids)
    return [(minute, n) for minute, n in per_minute.items() if n]


def delivery_latency(*, since: datetime, lambda_ids: Collection[int] | None = None) -> Latency:
    """p50/p95/p99 of `started_at - run_at` of first attempts that started since `since`."""
    return percentiles(outcomes.latencies_since(since=since, lambda_ids=lambda_ids))


def percentiles(latencies: Latencies) -> Latency:
    """The p50/p95/p99 of counted latencies."""
    return Latency(count=latencies.count, p50_s=latencies.quantile(0.5),
                   p95_s=latencies.quantile(0.95), p99_s=latencies.quantile(0.99))


def latency_histogram(*, since: datetime, lambda_ids: Collection[int] | None = None,
                      bounds: tuple[float, ...] = LATENCY_BUCKETS_S) -> Histogram:
    """Cumulative bucket counts of the delivery latency since `since` (`Latencies.at_most`)."""
    latencies = outcomes.latencies_since(since=since, lambda_ids=lambda_ids)
    return Histogram(bounds=bounds, buckets=tuple(latencies.at_most(bound) for bound in bounds),
                     count=latencies.count, sum_s=latencies.sum_s)


@shards.across(shards.added)
def failures_by_lambda(*, since: datetime, lambda_ids: Collection[int] | None = None,
                       ) -> dict[str, int]:
    """lambda name -> tasks that ended fatal_failure or dead since `since`."""
    rows = (
        _tasks(lambda_ids).filter(status__in=list(FAILED), finished_at__gte=since)
        .order_by().values_list("lambda_ref__name").annotate(n=Count("pk"))
    )
    return dict(rows)


def live_workers(*, now: datetime, lambda_ids: Collection[int] | None = None) -> int:
    """Worker processes live by their heartbeat (see tasks_core.liveness); with `lambda_ids`,
    only those that serve one of these lambdas (a worker of no listed lambda serves all)."""
    workers = liveness.live_workers(now=now)
    if lambda_ids is None:
        return workers.count()
    if not lambda_ids:
        return 0
    names = set(Lambda.objects.filter(pk__in=list(lambda_ids)).values_list("name", flat=True))
    # One row per worker process: the JSON lists are compared here, as SQLite has no
    # JSON containment lookup.
    return sum(1 for served in workers.values_list("lambdas", flat=True)
               if not served or names.intersection(served))


def snapshot(*, now: datetime, window_s: float = 900.0,
             lambda_ids: Collection[int] | None = None) -> Snapshot:
    """All of the above for the last `window_s` seconds, limited to `lambda_ids` when given."""
    since = now - timedelta(seconds=window_s)
    lambdas = Lambda.objects.order_by("name")
    if lambda_ids is not None:
        lambdas = lambdas.filter(pk__in=list(lambda_ids))
    depths: dict[str, dict[str, int]] | None
    try:
        depths = queue_depths(list(lambdas.values_list("name", flat=True)))
    except QueueUnavailable as exc:
        logger.warning("queue depths unavailable: %s", exc)
        depths = None
    return Snapshot(
        now=now,
        window_s=window_s,
        counts=status_counts(lambda_ids=lambda_ids),
        counts_by_lambda=status_counts_by_lambda(lambda_ids=lambda_ids),
        queue_depths=depths,
        throughput=throughput(since=since, lambda_ids=lambda_ids),
        latency=delivery_latency(since=since, lambda_ids=lambda_ids),
        failures_by_lambda=failures_by_lambda(since=since, lambda_ids=lambda_ids),
        live_workers=live_workers(now=now, lambda_ids=lambda_ids),
    )
