"""The rollup of finished outcomes: per lambda, final status and minute, how many tasks finished;
and per lambda and minute of their start, the delivery latencies of first attempts.

Counting the history on every scrape costs more as the table fills; the rollup grows with time
only. The consumer folds the tasks that finished since the last fold into it (`fold`, from its
housekeeping), one step per transaction, which
- takes the one OutcomeFold row FOR UPDATE SKIP LOCKED (another consumer folding skips it),
- counts the tasks that finished in [folded_until, end) by lambda, status and minute (through
  the (status, finished_at) index),
- adds them to OutcomeMinute and OutcomeTotal (INSERT … ON CONFLICT DO UPDATE),
- counts the first attempts among them by lambda, minute of their start and bucket of their
  delivery latency (tasks_core.latency_buckets), and adds them to the LatencyMinute rows of
  those minutes (read, added to, and written back: the step holds the mark, so no other fold
  writes them meanwhile),
- and moves folded_until to `end` only if it still reads what the step began from (on SQLite,
  which has no SKIP LOCKED, a step that lost a race rolls back),
so each finished task is added once. Folds stop SETTLE_S before now: a finish commits a moment
after its finished_at (taken from a worker's clock), and a task whose finished_at a fold has
passed would never be counted.

Readers add what the rollup does not reach yet, the tasks finished at or after folded_until,
counted from their rows: counts are exact when read, with or without a consumer running, and
that tail is a few seconds of finishes. A prune deletes tasks, not their outcomes, so a total
never goes down; a requeued task that finishes again is counted again (totals count finishes).
The latencies' tail also holds the first attempts still running (they count from their start).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Collection, Iterable
from datetime import UTC, datetime, timedelta

from django.db import transaction
from django.db.models import Count, Min, Q, QuerySet
from django.db.models.functions import TruncMinute

from tasks_core import shards
from tasks_core.latency_buckets import Latencies, by_lambda_minute, grouped
from tasks_core.models import LatencyMinute, OutcomeFold, OutcomeMinute, OutcomeTotal, TaskEntity
from tasks_core.states import FINAL, TaskStatus

logger = logging.getLogger(__name__)

#: A fold leaves out the tasks that finished in the last SETTLE_S seconds: a finish whose commit
#: comes later than this after its finished_at (clock skew between hosts included) is missed.
SETTLE_S = 10.0
#: One step folds at most this span of finish times (from its first finished task), so that
#: its transaction stays short after a consumer was down for a while.
STEP_S = 15.0
#: Seconds of folding per housekeeping round at most: the rest waits for the next round.
FOLD_BUDGET_S = 0.2
#: Minute rows (outcomes and latencies) are kept this long: the longest window a reader asks
#: for (`/api/v1/stats/` takes up to 1,440 minutes) and an hour more.
MINUTES_KEPT_S = 25 * 3600.0

_MARK = 1


def folded_until() -> datetime | None:
    """Where the rollup ends; None before the first fold (readers then count every row)."""
    return OutcomeFold.objects.filter(pk=_MARK).values_list("folded_until", flat=True).first()


def _finished(statuses: Iterable[TaskStatus], since: datetime | None,
              lambda_ids: Collection[int] | None) -> QuerySet[TaskEntity]:
    rows = TaskEntity.objects.filter(status__in=[s.value for s in statuses])
    rows = rows.filter(finished_at__isnull=False) if since is None else \
        rows.filter(finished_at__gte=since)
    if lambda_ids is not None:
        rows = rows.filter(lambda_ref_id__in=list(lambda_ids))
    return rows


def finished_by_lambda(*, statuses: Collection[TaskStatus] = FINAL,
                       lambda_ids: Collection[int] | None = None,
                       ) -> Counter[tuple[int, str]]:
    """(lambda id, status) -> tasks that reached the status, since the store began."""
    with shards.one_snapshot():  # the mark, the totals and the rows after the mark
        until = folded_until()
        counts: Counter[tuple[int, str]] = Counter()
        totals = OutcomeTotal.objects.filter(status__in=[s.value for s in statuses])
        if lambda_ids is not None:
            totals = totals.filter(lambda_ref_id__in=list(lambda_ids))
        for lambda_id, status, n in totals.values_list("lambda_ref_id", "status", "finished"):
            counts[lambda_id, status] += n
        tail = (_finished(statuses, until, lambda_ids).order_by()
                .values_list("lambda_ref_id", "status").annotate(n=Count("pk")))
        for lambda_id, status, n in tail:
            counts[lambda_id, status] += n
        return counts


def _minutes(answers: list[dict[datetime, int]]) -> dict[datetime, int]:
    return dict(sorted(shards.added(answers).items()))


@shards.across(_minutes)
def finished_per_minute(*, since: datetime, statuses: Collection[TaskStatus] = FINAL,
                        lambda_ids: Collection[int] | None = None) -> dict[datetime, int]:
    """minute -> tasks that reached one of `statuses` in it, for the minutes from the one that
    holds `since` on (that first minute counted whole)."""
    with shards.one_snapshot():  # the mark, the minutes and the rows after the mark
        first = since.astimezone(UTC).replace(second=0, microsecond=0)
        until = folded_until()
        counts: Counter[datetime] = Counter()
        minutes = OutcomeMinute.objects.filter(status__in=[s.value for s in statuses],
                                               minute__gte=first)
        if lambda_ids is not None:
            minutes = minutes.filter(lambda_ref_id__in=list(lambda_ids))
        for minute, n in minutes.values_list("minute", "finished"):
            counts[minute] += n
        tail = (_finished(statuses, first if until is None else max(until, first), lambda_ids)
                .annotate(minute=TruncMinute("finished_at", tzinfo=UTC)).order_by()
                .values_list("minute").annotate(n=Count("pk")))
        for minute, n in tail:
            counts[minute] += n
        return dict(sorted(counts.items()))


def _latency_minutes(answers: list[dict[datetime, Latencies]]) -> dict[datetime, Latencies]:
    merged: dict[datetime, Latencies] = {}
    for answer in answers:
        for minute, latencies in answer.items():
            merged.setdefault(minute, Latencies()).add(latencies)
    return dict(sorted(merged.items()))


@shards.across(_latency_minutes)
def latencies_per_minute(*, since: datetime, lambda_ids: Collection[int] | None = None,
                         ) -> dict[datetime, Latencies]:
    """minute -> delivery latencies of the first attempts that started in it (finished or still
    running), for the minutes from the one that holds `since` on (that first minute whole)."""
    if lambda_ids is not None and not lambda_ids:  # the ORM cannot write SQL for "in ()"
        return {}
    with shards.one_snapshot():  # the mark, the minutes and the rows after the mark
        first = since.astimezone(UTC).replace(second=0, microsecond=0)
        until = folded_until()
        per_minute: dict[datetime, Latencies] = {}
        minutes = LatencyMinute.objects.filter(minute__gte=first)
        tail = TaskEntity.objects.filter(
            Q(status__in=[s.value for s in FINAL],
              finished_at__gte=first if until is None else max(until, first))
            | Q(status=TaskStatus.PROCESSING),
            started_at__gte=first)
        if lambda_ids is not None:
            minutes = minutes.filter(lambda_ref_id__in=list(lambda_ids))
            tail = tail.filter(lambda_ref_id__in=list(lambda_ids))
        for minute, buckets, sum_s in minutes.values_list("minute", "buckets", "sum_s"):
            per_minute.setdefault(minute, Latencies()).add(Latencies.stored(buckets, sum_s))
        for (_lambda_id, minute), latencies in by_lambda_minute(grouped(tail)).items():
            per_minute.setdefault(minute, Latencies()).add(latencies)
        return dict(sorted(per_minute.items()))


def latencies_since(*, since: datetime, lambda_ids: Collection[int] | None = None) -> Latencies:
    """The delivery latencies of the first attempts that started from the minute of `since` on."""
    total = Latencies()
    for latencies in latencies_per_minute(since=since, lambda_ids=lambda_ids).values():
        total.add(latencies)
    return total


def fold(*, now: datetime, budget_s: float = FOLD_BUDGET_S) -> int:
    """Fold finished tasks into the rollup, step after step until it reaches SETTLE_S before
    `now` or `budget_s` is spent; return how many tasks were folded."""
    deadline_s = time.monotonic() + budget_s
    _ensure_mark(now - timedelta(seconds=SETTLE_S))
    folded = 0
    while (step := fold_step(now=now)) is not None:
        folded += step
        if time.monotonic() >= deadline_s:
            break
    kept_from = now - timedelta(seconds=MINUTES_KEPT_S)
    OutcomeMinute.objects.filter(minute__lt=kept_from).delete()
    LatencyMinute.objects.filter(minute__lt=kept_from).delete()
    if folded:
        logger.debug("folded %d finished task(s) into the rollup", folded,
                     extra={"action": "outcomes_folded"})
    return folded


def fold_step(*, now: datetime) -> int | None:
    """One step of `fold`: the tasks it added, or None when there was nothing to fold (caught
    up, or another consumer is folding)."""
    upto = now - timedelta(seconds=SETTLE_S)
    with shards.atomic():
        start = (OutcomeFold.objects.select_for_update(skip_locked=True).filter(pk=_MARK)
                 .values_list("folded_until", flat=True).first())
        if start is None or start >= upto:
            return None
        first = _first_finish(start)
        end = upto if first is None else min(upto, max(first, start) + timedelta(seconds=STEP_S))
        folding = _finished(FINAL, start, None).filter(finished_at__lt=end)
        rows = list(
            folding.annotate(minute=TruncMinute("finished_at", tzinfo=UTC)).order_by()
            .values_list("lambda_ref_id", "status", "minute").annotate(n=Count("pk"))
        )
        _add(rows)
        _add_latencies(by_lambda_minute(grouped(folding)))
        moved = OutcomeFold.objects.filter(pk=_MARK, folded_until=start).update(folded_until=end)
        if not moved:
            # Another fold moved the mark since this one read it (SQLite): add nothing.
            transaction.set_rollback(True, using=shards.current())
            return None
    return sum(n for *_key, n in rows)


def _first_finish(since: datetime) -> datetime | None:
    """The earliest finished_at at or after `since`: one index lookup per final status."""
    firsts = [
        TaskEntity.objects.filter(status=status.value, finished_at__gte=since)
        .aggregate(first=Min("finished_at"))["first"]
        for status in sorted(FINAL)
    ]
    return min((first for first in firsts if first is not None), default=None)


def _ensure_mark(upto: datetime) -> None:
    """Make the OutcomeFold row if it is missing (migration 0018 makes it; a flushed test
    database has none): the fold then starts at the oldest finished task."""
    if OutcomeFold.objects.filter(pk=_MARK).exists():
        return
    start = _first_finish(datetime.min.replace(tzinfo=UTC)) or upto
    OutcomeFold.objects.bulk_create([OutcomeFold(pk=_MARK, folded_until=start)],
                                    ignore_conflicts=True)


def _add(rows: list[tuple[int, str, datetime, int]]) -> None:
    """Add the counts of a step to the minute rows and the totals."""
    if not rows:
        return
    adapt = shards.connection().ops.adapt_datetimefield_value
    minutes = Counter({(lambda_id, status, adapt(minute)): n
                       for lambda_id, status, minute, n in rows})
    totals: Counter[tuple[int, str]] = Counter()
    for lambda_id, status, _minute, n in rows:
        totals[lambda_id, status] += n
    for model, keys, counts in (
        (OutcomeMinute, ("lambda_ref_id", "status", "minute"), minutes),
        (OutcomeTotal, ("lambda_ref_id", "status"), totals),
    ):
        table = shards.connection().ops.quote_name(model._meta.db_table)
        columns = ", ".join(keys)
        placeholders = ", ".join(["%s"] * (len(keys) + 1))
        with shards.connection().cursor() as cursor:
            cursor.executemany(
                f"INSERT INTO {table} ({columns}, finished) VALUES ({placeholders}) "  # noqa: S608
                f"ON CONFLICT ({columns}) DO UPDATE SET finished = {table}.finished "
                "+ excluded.finished",
                [(*key, n) for key, n in counts.items()],
            )


def _add_latencies(added: dict[tuple[int, datetime], Latencies]) -> None:
    """Add a step's latencies to the minute rows: read, add, write back (the caller holds the
    mark, so no other fold writes these rows until it commits)."""
    if not added:
        return
    merged = {key: Latencies() for key in added}
    stored = LatencyMinute.objects.filter(lambda_ref_id__in={lambda_id for lambda_id, _ in added},
                                          minute__in={minute for _, minute in added})
    for lambda_id, minute, buckets, sum_s in stored.values_list("lambda_ref_id", "minute",
                                                                "buckets", "sum_s"):
        if (lambda_id, minute) in merged:
            merged[lambda_id, minute].add(Latencies.stored(buckets, sum_s))
    for key, latencies in added.items():
        merged[key].add(latencies)
    LatencyMinute.objects.bulk_create(
        [LatencyMinute(lambda_ref_id=lambda_id, minute=minute, buckets=latencies.to_json(),
                       sum_s=latencies.sum_s)
         for (lambda_id, minute), latencies in merged.items()],
        update_conflicts=True, unique_fields=["lambda_ref", "minute"],
        update_fields=["buckets", "sum_s"])
