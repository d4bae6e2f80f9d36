"""The log scale that the rollup counts delivery latencies on, and percentiles read back from it.

A first attempt's delivery latency (`started_at - run_at`, seconds) falls in bucket
`ceil(PER_DOUBLING * log2(latency))`: bucket i holds the latencies in (2**((i-1)/8), 2**(i/8)],
the boundaries of a Prometheus native histogram of schema 3. Latencies of ZERO_S or less (and
negative ones, from clocks apart) fall in bucket ZERO_INDEX, which holds [0, ZERO_S]. The bucket
is computed in SQL where the tasks are grouped (`grouped`), so the rollup's fold and its readers'
tail of unfolded rows never fetch a task row.

A percentile read from the buckets (`Latencies.quantile`) places each ranked latency inside its
bucket and interpolates between ranks as PostgreSQL's percentile_cont does; every estimate is
within one bucket of the exact value: at most ERROR (9.05%) above or below it, or ZERO_S for
latencies under ZERO_S.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.db.models import (
    Case,
    Count,
    DurationField,
    ExpressionWrapper,
    F,
    FloatField,
    Func,
    IntegerField,
    QuerySet,
    Sum,
    Value,
    When,
)
from django.db.models.functions import Cast, Ceil, Greatest, Ln, TruncMinute

#: Buckets per doubling of the latency.
PER_DOUBLING = 8
#: The ratio of a bucket's upper bound to its lower one.
GROWTH = 2.0 ** (1.0 / PER_DOUBLING)
#: The largest relative error of a percentile read from the buckets.
ERROR = GROWTH - 1.0
#: The bucket of latencies of ZERO_S (122 µs) or less.
ZERO_INDEX = -13 * PER_DOUBLING
ZERO_S = 2.0 ** (ZERO_INDEX / PER_DOUBLING)


class LatencySeconds(Func):
    """`started_at - run_at` of a task row in seconds, as a float in SQL: the difference as
    Django writes it (an interval on PostgreSQL; on SQLite, which keeps a duration as a number of
    microseconds, an exact count of them), then converted."""

    output_field = FloatField()

    def __init__(self) -> None:
        super().__init__(ExpressionWrapper(F("started_at") - F("run_at"),
                                           output_field=DurationField()))

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return self.as_sql(compiler, connection,
                           template="EXTRACT(EPOCH FROM %(expressions)s)::double precision",
                           **extra)

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return self.as_sql(compiler, connection, template="(%(expressions)s / 1000000.0)",
                           **extra)


def grouped(tasks: QuerySet[Any]) -> Iterator[tuple[int, datetime, int, int, float]]:
    """(lambda id, minute the attempt started in, bucket, tasks, sum of their latencies in
    seconds) of the first attempts among `tasks`, counted in the database."""
    rows = (
        tasks.filter(attempts=1, started_at__isnull=False)
        .annotate(latency_s=LatencySeconds())
        .annotate(
            started_minute=TruncMinute("started_at", tzinfo=UTC),
            bucket=Cast(Case(When(latency_s__lte=ZERO_S, then=Value(float(ZERO_INDEX))),
                             default=Ceil(Ln("latency_s") * Value(PER_DOUBLING / math.log(2))),
                             output_field=FloatField()),
                        IntegerField()),
        )
        .order_by().values_list("lambda_ref_id", "started_minute", "bucket")
        .annotate(n=Count("pk"), sum_s=Sum(Greatest("latency_s", Value(0.0))))
    )
    for lambda_id, minute, bucket, n, sum_s in rows:
        yield lambda_id, minute, bucket, n, float(sum_s or 0.0)


def bounds(index: int) -> tuple[float, float]:
    """The latencies (seconds) bucket `index` holds: (lower, upper]; [0, ZERO_S] for ZERO_INDEX."""
    if index <= ZERO_INDEX:
        return 0.0, ZERO_S
    return GROWTH ** (index - 1), GROWTH ** index


@dataclass
class Latencies:
    """Delivery latencies as counts per bucket of the scale, and their sum in seconds."""

    buckets: Counter[int] = field(default_factory=Counter)
    sum_s: float = 0.0

    @classmethod
    def stored(cls, buckets: Mapping[str, int], sum_s: float) -> Latencies:
        """From the JSON a rollup row keeps (bucket indexes are its keys, as text)."""
        return cls(Counter({int(index): n for index, n in buckets.items()}), sum_s)

    def to_json(self) -> dict[str, int]:
        return {str(index): n for index, n in sorted(self.buckets.items()) if n}

    @property
    def count(self) -> int:
        return sum(self.buckets.values())

    def add(self, other: Latencies) -> None:
        self.buckets.update(other.buckets)
        self.sum_s += other.sum_s

    def add_bucket(self, index: int, n: int, sum_s: float) -> None:
        self.buckets[index] += n
        self.sum_s += sum_s

    def quantile(self, q: float) -> float | None:
        """The `q` quantile (seconds), or None when empty: interpolated between the two
        nearest ranks as percentile_cont is, each rank placed within its bucket."""
        count = self.count
        if not count:
            return None
        position = q * (count - 1)
        low = int(position)
        high = min(low + 1, count - 1)
        at_low, at_high = self._ranked(low), self._ranked(high)
        return at_low + (at_high - at_low) * (position - low)

    def _ranked(self, rank: int) -> float:
        """The estimate of the latency at `rank` (0: the smallest): the ranks in a bucket are
        spread evenly over it, on the log scale (linearly in the zero bucket)."""
        below = 0
        for index, n in sorted(self.buckets.items()):
            if rank < below + n:
                share = (rank - below + 0.5) / n
                lower, upper = bounds(index)
                if index <= ZERO_INDEX:
                    return upper * share
                return float(lower * (upper / lower) ** share)
            below += n
        raise ValueError(f"rank {rank} of {below} latencies")

    def at_most(self, bound_s: float) -> int:
        """How many latencies lie in buckets that end at or below `bound_s` (a bound between
        two of the scale's counts the buckets below it: up to ERROR short of it)."""
        return sum(n for index, n in self.buckets.items()
                   if bounds(index)[1] <= bound_s * (1.0 + 1e-9))


def by_lambda_minute(rows: Iterable[tuple[int, datetime, int, int, float]],
                     ) -> dict[tuple[int, datetime], Latencies]:
    """`grouped`'s rows as (lambda id, minute) -> Latencies."""
    latencies: dict[tuple[int, datetime], Latencies] = defaultdict(Latencies)
    for lambda_id, minute, index, n, sum_s in rows:
        latencies[lambda_id, minute].add_bucket(index, n, sum_s)
    return dict(latencies)
