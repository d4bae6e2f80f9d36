"""Percentiles and the median/min/max summary of repeated runs."""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile (fraction in 0..1) of a non-empty sequence."""
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(fraction * len(ordered) + 0.5) - 1))
    return ordered[rank]


def lateness_ms(rows: Sequence[tuple[float, float, float]]) -> dict[str, float]:
    """p50/p95/p99/max of start - due, in milliseconds."""
    if not rows:
        raise ValueError("no task started before the wait ended (see the notes)")
    late = [(start - due) * 1000.0 for due, start, _end in rows]
    return {"p50": percentile(late, 0.50), "p95": percentile(late, 0.95),
            "p99": percentile(late, 0.99), "max": max(late)}


def summary(values: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "runs": len(values)}
