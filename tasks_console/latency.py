"""Delivery latency p50/p95 per minute, for the dashboard's time series.

`tasks_core.stats.delivery_latency` gives one set of percentiles for a whole window; the chart
needs one per minute, so this groups the same selection of first attempts by minute.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable
from datetime import UTC, datetime, timedelta

from django.db import connection
from django.db.models.functions import TruncMinute
from django.utils import timezone

from tasks_core import stats


def per_minute(*, since: datetime, lambda_ids: Collection[int] | None = None,
               ) -> dict[datetime, tuple[float, float]]:
    """minute -> (p50, p95) delivery latency in seconds, for minutes with a started task."""
    if lambda_ids is not None and not lambda_ids:  # the ORM cannot write SQL for "in ()"
        return {}
    # stats has no public per-minute form; it shares its selection and latency expression.
    started = (stats.started_since(since, lambda_ids)
               .annotate(latency=stats.LATENCY, minute=TruncMinute("started_at")))
    if connection.vendor != "postgresql":
        return _in_python(started.values_list("minute", "latency"))
    sql, params = started.values("minute", "latency").query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT sub.minute, percentile_cont(ARRAY[0.5, 0.95]) WITHIN GROUP "
            "(ORDER BY extract(epoch FROM sub.latency)) "
            f"FROM ({sql}) AS sub GROUP BY sub.minute",  # noqa: S608 -- ORM-built, params bound
            params,
        )
        rows = cursor.fetchall()
    # A raw cursor returns the truncated minute as a naive UTC timestamp.
    return {_aware(minute): (max(float(p50), 0.0), max(float(p95), 0.0))
            for minute, (p50, p95) in rows}


def _aware(moment: datetime) -> datetime:
    return timezone.make_aware(moment, UTC) if timezone.is_naive(moment) else moment


def _in_python(rows: Iterable[tuple[datetime, timedelta]]) -> dict[datetime, tuple[float, float]]:
    by_minute: dict[datetime, list[float]] = defaultdict(list)
    for minute, latency in rows:
        by_minute[minute].append(max(latency.total_seconds(), 0.0))
    return {minute: (stats.percentile(sorted(v), 0.5), stats.percentile(sorted(v), 0.95))
            for minute, v in by_minute.items()}
