"""Read-only statistics of the task store and the queues, shared by the API, console and metrics.

Everything is counted in the database where it can be, and nothing reads the whole history:
live tasks and dead letters are counted from their rows, the other finished tasks and the
throughput from the rollup of outcomes (tasks_core.outcomes). "Delivery latency" is
`started_at - run_at` of the first attempt of tasks that started within the window: how late
a task began after it was due (retries, whose start includes a backoff, are left out).
Recent-window queries go through the (status, finished_at) index: a task that started is either
still processing or finished.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Count, DurationField, ExpressionWrapper, F, Q, QuerySet, Sum

from tasks_core import liveness, outcomes, queues, shards
from tasks_core.conf import atf_settings
from tasks_core.exceptions import QueueUnavailable
from tasks_core.models import Lambda, TaskEntity
from tasks_core.states import COUNTED_FROM_ROWS, FINAL, TaskStatus
from tasks_core.store import backends

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

#: The delivery latency of a task row, for annotate(): started_at - run_at.
LATENCY = ExpressionWrapper(F("started_at") - F("run_at"), output_field=DurationField())


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


def started_since(since: datetime, lambda_ids: Collection[int] | None = None,
                  ) -> QuerySet[TaskEntity]:
    """First attempts that started at or after `since` (index-friendly, see module docstring)."""
    recent = Q(status__in=list(FINAL), finished_at__gte=since) | Q(status=TaskStatus.PROCESSING)
    return _tasks(lambda_ids).filter(recent, started_at__gte=since, attempts=1)


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
    """lambda -> priority -> messages waiting in its queue. Raises QueueUnavailable."""
    owned = backend is None
    backend = backend or queues.backend()
    try:
        return {
            name: {priority: backend.depth(backend.queue_name(name, priority))
                   for priority in atf_settings.priorities}
            for name in lambda_names
        }
    finally:
        if owned:
            backend.close()


def throughput(*, since: datetime, lambda_ids: Collection[int] | None = None,
               ) -> list[tuple[datetime, int]]:
    """(minute, tasks that finished success/fatal/dead in it) from the minute of `since` on,
    oldest first, read from the rollup of outcomes."""
    per_minute = outcomes.finished_per_minute(since=since, statuses=DONE, lambda_ids=lambda_ids)
    return [(minute, n) for minute, n in per_minute.items() if n]


def _weighted(latencies: list[Latency]) -> Latency:
    """Shards' percentiles as one answer: each weighted by its shard's count (an estimate:
    percentiles do not add up)."""
    count = sum(latency.count for latency in latencies)
    if not count:
        return Latency(count=0, p50_s=None, p95_s=None, p99_s=None)

    def mean(name: str) -> float:
        return sum((getattr(one, name) or 0.0) * one.count for one in latencies) / count

    return Latency(count=count, p50_s=mean("p50_s"), p95_s=mean("p95_s"), p99_s=mean("p99_s"))


@shards.across(_weighted)
def delivery_latency(*, since: datetime, lambda_ids: Collection[int] | None = None) -> Latency:
    """p50/p95/p99 of `started_at - run_at` of first attempts that started since `since`
    (with shards, each shard's weighted by its count)."""
    if lambda_ids is not None and not lambda_ids:  # the ORM cannot write SQL for "in ()"
        return Latency(count=0, p50_s=None, p95_s=None, p99_s=None)
    started = started_since(since, lambda_ids)
    if backends.current().supports_percentiles:
        sql, params = started.annotate(latency=LATENCY).values("latency").query.sql_with_params()
        with shards.connection().cursor() as cursor:
            cursor.execute(
                "SELECT count(*), percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP "
                "(ORDER BY extract(epoch FROM sub.latency)) "
                f"FROM ({sql}) AS sub",  # noqa: S608 -- the ORM built `sql`; values are params
                params,
            )
            count, percentiles = cursor.fetchone()
        if not count:
            return Latency(count=0, p50_s=None, p95_s=None, p99_s=None)
        p50, p95, p99 = (max(float(p), 0.0) for p in percentiles)
        return Latency(count=count, p50_s=p50, p95_s=p95, p99_s=p99)
    return _latency_in_python(started)


def _latency_in_python(started: QuerySet[TaskEntity]) -> Latency:
    """The percentiles computed here, for databases without percentile_cont (SQLite)."""
    values = sorted(
        max((start - run_at).total_seconds(), 0.0)
        for start, run_at in started.values_list("started_at", "run_at")
        if start is not None  # never: started_since() filters on started_at
    )
    if not values:
        return Latency(count=0, p50_s=None, p95_s=None, p99_s=None)
    return Latency(count=len(values), p50_s=percentile(values, 0.5),
                   p95_s=percentile(values, 0.95), p99_s=percentile(values, 0.99))


def percentile(ordered: Sequence[float], q: float) -> float:
    """The `q` quantile of non-empty sorted values, interpolated between the two nearest, as
    PostgreSQL's percentile_cont computes it (for databases without it)."""
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _histograms(parts: list[Histogram]) -> Histogram:
    return Histogram(bounds=parts[0].bounds,
                     buckets=tuple(map(sum, zip(*(part.buckets for part in parts),
                                                strict=True))),
                     count=sum(part.count for part in parts),
                     sum_s=sum(part.sum_s for part in parts))


@shards.across(_histograms)
def latency_histogram(*, since: datetime, lambda_ids: Collection[int] | None = None,
                      bounds: tuple[float, ...] = LATENCY_BUCKETS_S) -> Histogram:
    """Cumulative bucket counts of the delivery latency since `since`, counted in one query."""
    started = started_since(since, lambda_ids).annotate(latency=LATENCY)
    buckets = {f"le{i}": Count("pk", filter=Q(latency__lte=timedelta(seconds=bound)))
               for i, bound in enumerate(bounds)}
    row = started.aggregate(total=Count("pk"), sum=Sum("latency"), **buckets)
    sum_s = row["sum"].total_seconds() if row["sum"] is not None else 0.0
    return Histogram(bounds=bounds, buckets=tuple(row[f"le{i}"] or 0 for i in range(len(bounds))),
                     count=row["total"] or 0, sum_s=max(sum_s, 0.0))


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
