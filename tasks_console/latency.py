"""Delivery latency for the dashboard: the hour's percentiles (its cards) and each minute's p50
and p95 (its chart), from one read of the rollup of latencies (tasks_core.outcomes)."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from tasks_core import outcomes, stats
from tasks_core.latency_buckets import Latencies


def window(*, since: datetime, lambda_ids: Collection[int] | None = None,
           ) -> tuple[stats.Latency, dict[datetime, tuple[float, float]]]:
    """The percentiles of the first attempts that started from the minute of `since` on, and
    minute -> (p50, p95) in seconds for the minutes with a started task."""
    minutes = outcomes.latencies_per_minute(since=since, lambda_ids=lambda_ids)
    total = Latencies()
    for latencies in minutes.values():
        total.add(latencies)
    return stats.percentiles(total), {
        minute: (latencies.quantile(0.5) or 0.0, latencies.quantile(0.95) or 0.0)
        for minute, latencies in minutes.items() if latencies.count}
