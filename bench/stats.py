"""Percentiles, the median/min/max summary of repeated runs, and sampled counters."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile (fraction in 0..1) of a non-empty sequence: the smallest value
    with at least that fraction of the values at or below it."""
    ordered = sorted(values)
    rank = math.ceil(round(fraction * len(ordered), 9))  # 0.95 * 100 is 95.00000000000001
    return ordered[max(0, min(len(ordered) - 1, rank - 1))]


def lateness_ms(rows: Sequence[tuple[float, float, float]]) -> dict[str, float]:
    """p50/p95/p99/max of start - due, in milliseconds."""
    if not rows:
        raise ValueError("no task started before the wait ended (see the notes)")
    late = [(start - due) * 1000.0 for due, start, _end in rows]
    return {"p50": percentile(late, 0.50), "p95": percentile(late, 0.95),
            "p99": percentile(late, 0.99), "max": max(late)}


def drain_rate(rows: Sequence[tuple[float, float, float]]) -> float:
    """Tasks ÷ (last end − first start): the workers' start-up is not counted."""
    if not rows:
        raise ValueError("no task finished before the wait ended (see the notes)")
    first_start = min(start for _due, start, _end in rows)
    last_end = max(end for _due, _start, end in rows)
    return len(rows) / (last_end - first_start)


def summary(values: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "runs": len(values)}


def window_rates(starts: Sequence[float], *, begin: float, end: float,
                 window_s: float) -> list[float]:
    """Tasks started per second in each whole `window_s` window from `begin` up to `end`."""
    count = int((end - begin) // window_s)
    counts = [0] * count
    for start in starts:
        index = int((start - begin) // window_s)
        if 0 <= index < count:
            counts[index] += 1
    return [n / window_s for n in counts]


def ramp_seconds(rates: Sequence[float], *, window_s: float,
                 fraction: float = 0.9) -> tuple[float, float]:
    """(seconds until full speed, the steady rate) of a drain released at the first window.

    The steady rate is the median of the windows' rates; full speed is reached at the start of
    the first window whose rate is at least `fraction` of it.
    """
    if not rates or max(rates) <= 0:
        raise ValueError("no task started in the observed windows")
    steady = statistics.median(rates)
    first = next(index for index, rate in enumerate(rates) if rate >= fraction * steady)
    return first * window_s, steady


def value_at(samples: Sequence[tuple[float, float]], moment: float) -> float:
    """A counter's value at `moment`, linear between the (time, value) samples around it (the
    first or last sample outside their span)."""
    earlier = [(t, v) for t, v in samples if t <= moment]
    later = [(t, v) for t, v in samples if t > moment]
    if not earlier:
        return samples[0][1]
    if not later:
        return samples[-1][1]
    (t0, v0), (t1, v1) = earlier[-1], later[0]
    return v0 + (v1 - v0) * (moment - t0) / (t1 - t0)
