"""Delivery latency p50/p95 per minute, for the dashboard's time series.

`tasks_core.stats.delivery_latency` gives one set of percentiles for a whole window; the chart
needs one per minute: the same rollup of latency buckets (tasks_core.outcomes), minute by minute.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from tasks_core import outcomes


def per_minute(*, since: datetime, lambda_ids: Collection[int] | None = None,
               ) -> dict[datetime, tuple[float, float]]:
    """minute -> (p50, p95) delivery latency in seconds, for minutes with a started task."""
    return {minute: (latencies.quantile(0.5) or 0.0, latencies.quantile(0.95) or 0.0)
            for minute, latencies in outcomes.latencies_per_minute(
                since=since, lambda_ids=lambda_ids).items()
            if latencies.count}
