"""The rollup's log scale of delivery latencies: percentiles read back within its stated error."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest

from tasks_core.latency_buckets import (
    ERROR,
    GROWTH,
    PER_DOUBLING,
    ZERO_INDEX,
    ZERO_S,
    Latencies,
    bounds,
)


def bucket(latency_s: float) -> int:
    """The bucket as the SQL of `latency_buckets.grouped` computes it."""
    if latency_s <= ZERO_S:
        return ZERO_INDEX
    return math.ceil(math.log(latency_s) * PER_DOUBLING / math.log(2))


def counted(values: list[float]) -> Latencies:
    return Latencies(Counter(bucket(v) for v in values), sum(max(v, 0.0) for v in values))


def percentile_cont(values: list[float], q: float) -> float:
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("size", [1, 2, 7, 1000, 20000])
def test_percentiles_are_within_the_bucket_error_of_the_exact_ones(seed: int, size: int) -> None:
    # Given delivery latencies of a long-tailed distribution (log-normal around 50 ms)
    values = [random.Random(seed * size + n).lognormvariate(math.log(0.05), 1.5)
              for n in range(size)]
    # When they are counted in buckets and percentiles read back
    latencies = counted(values)
    # Then each percentile is within ERROR of PostgreSQL's percentile_cont of the values
    assert latencies.count == size
    for q in (0.0, 0.5, 0.95, 0.99, 1.0):
        exact = percentile_cont(values, q)
        assert latencies.quantile(q) == pytest.approx(exact, rel=ERROR, abs=ZERO_S)


def test_the_error_is_the_width_of_a_bucket_and_no_less() -> None:
    # Given one latency at the bottom edge of its bucket
    lower, upper = bounds(bucket(1.0001))
    assert (lower, upper) == pytest.approx((1.0, GROWTH))
    # When its median is read back, Then it is placed mid-bucket (on the log scale)
    estimate = counted([1.0001]).quantile(0.5)
    assert estimate == pytest.approx(math.sqrt(GROWTH))
    assert abs(estimate - 1.0001) / 1.0001 < ERROR < 0.091


def test_latencies_at_or_below_zero_share_the_zero_bucket() -> None:
    # Given a latency of 0, a negative one (clocks apart) and one of 100 µs
    latencies = counted([0.0, -2.0, 0.0001])
    # Then all three are in the zero bucket, read back within ZERO_S of 0
    assert latencies.buckets == Counter({ZERO_INDEX: 3})
    assert 0.0 <= (latencies.quantile(0.99) or 0.0) <= ZERO_S
    assert latencies.sum_s == pytest.approx(0.0001)


def test_empty_latencies_have_no_percentile() -> None:
    assert Latencies().quantile(0.5) is None
    assert Latencies().count == 0


def test_at_most_counts_the_buckets_that_end_at_or_below_the_bound() -> None:
    # Given latencies of 0.5 s (a bucket boundary), 1.9 s, 2.45 s and 7 s
    latencies = counted([0.5, 1.9, 2.45, 7.0])
    # Then a bound on the scale counts exactly, one between two of its counts the buckets below
    assert latencies.at_most(0.5) == 1
    assert latencies.at_most(2.0) == 2
    assert latencies.at_most(2.5) == 2  # 2.45 is in (2.378, 2.594]: past 2.5's last whole bucket
    assert latencies.at_most(10.0) == 4


def test_stored_json_reads_back_the_same_counts() -> None:
    latencies = counted([0.0, 0.01, 0.01, 3.0])
    again = Latencies.stored(latencies.to_json(), latencies.sum_s)
    assert again == latencies
    assert all(isinstance(key, str) for key in latencies.to_json())
