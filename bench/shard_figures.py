"""The figures of the sharded-store measurements (`bench.shard_scaling`): their keys, and what
is derived from one drain's records and from the drains of every shard count. Pure: it starts
nothing and reads no server, so the report and the unit tests use it without the services.

A drain with S shards gives, under `shard_s{S}_…`: the total rate, each slot's rate and tasks,
the PostgreSQL CPU and WAL per task of each slot's cluster, its connections and its quota's
throttling; the pipeline's CPU per task (every process but PostgreSQL); the skew between the
slots' rates; and the lateness figures of tasks scheduled while the shards serve them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

#: The shard count the others are compared with.
BASELINE_SHARDS = 1
#: The scaling efficiency each count must reach, total(S) / (S × total(1)).
EFFICIENCY_TARGETS = {2: 0.9, 3: 0.85}
#: The most the pipeline's CPU per task may grow with shards, as a multiple of one shard's.
PIPELINE_CPU_LIMIT = 1.10
#: The fleet's roles that make up the pipeline (everything but PostgreSQL).
PIPELINE_ROLES = ("consumer", "worker", "redis")
#: Of each slot's cluster, per drain (µs and bytes are per task of that slot).
SLOT_PARTS = ("rate", "tasks", "pg_cpu_us", "wal_bytes", "conns", "throttled")
#: The shard-kill figures: the survivors' rate before and after one cluster stops, their
#: ratio, and the number of shards.
KILL_BEFORE, KILL_AFTER, KILL_RATIO = "shard_kill_before", "shard_kill_after", "shard_kill_ratio"
KILL_SHARDS = "shard_kill_shards"
#: One shard's total rate in its drain before the other counts' and in its drain after them.
BASELINE_FIRST, BASELINE_LAST = "shard_s1_first", "shard_s1_last"
_RATE = re.compile(r"shard_s(\d+)")

Row = tuple[float, float, float]


def rate_key(shards: int) -> str:
    """`shard_s3`: the total drain rate with 3 shards."""
    return f"shard_s{shards}"


def key(shards: int, part: str) -> str:
    """`shard_s3_efficiency`, `shard_s3_pipeline_cpu_us`, `shard_s3_immediate_p50`, …"""
    return f"{rate_key(shards)}_{part}"


def slot_key(shards: int, slot: int, part: str) -> str:
    """`shard_s3_slot1_pg_cpu_us`: one of SLOT_PARTS of slot 1's cluster."""
    return key(shards, f"slot{slot}_{part}")


def shard_counts(keys: Iterable[str]) -> list[int]:
    """The shard counts whose total rate is among `keys`, in ascending order."""
    return sorted(int(found[1]) for name in keys if (found := _RATE.fullmatch(name)))


def skew(rates: Sequence[float]) -> float:
    """(fastest − slowest) ÷ mean of the slots' rates: 0 where every shard drained alike."""
    return (max(rates) - min(rates)) * len(rates) / sum(rates)


def kill_rates(rows: Sequence[Row], killed_at: float) -> dict[str, float]:
    """The survivors' rate (tasks finished per second) from their first start until the kill,
    and from the kill until their last end; and after ÷ before."""
    first_start = min(start for _due, start, _end in rows)
    last_end = max(end for _due, _start, end in rows)
    before = sum(1 for _due, _start, end in rows if end <= killed_at) / (killed_at - first_start)
    after = sum(1 for _due, _start, end in rows if end > killed_at) / (last_end - killed_at)
    return {KILL_BEFORE: before, KILL_AFTER: after, KILL_RATIO: after / before}


def baseline_twice(first: Mapping[str, float], last: Mapping[str, float]) -> dict[str, float]:
    """One shard's figures as the mean of its drain before the other counts' and its drain
    after them, with the two total rates themselves. Minutes apart on the same machine, the
    same drain moved by a quarter (a machine that got faster or slower over the run); with the
    mean of both ends, such a drift moves both sides of each ratio alike."""
    return {**{name: (value + last[name]) / 2 for name, value in first.items() if name in last},
            BASELINE_FIRST: first[rate_key(BASELINE_SHARDS)],
            BASELINE_LAST: last[rate_key(BASELINE_SHARDS)]}


def with_comparisons(figures: Mapping[str, float], counts: Iterable[int]) -> dict[str, float]:
    """`figures` with, where the one-shard drain was measured, each count's scaling efficiency
    (`…_efficiency`) and its pipeline CPU per task as a ratio of one shard's
    (`…_pipeline_ratio`)."""
    done = dict(figures)
    baseline = figures.get(rate_key(BASELINE_SHARDS))
    pipeline = figures.get(key(BASELINE_SHARDS, "pipeline_cpu_us"))
    for count in counts:
        if baseline and rate_key(count) in figures:
            done[key(count, "efficiency")] = figures[rate_key(count)] / (count * baseline)
        if pipeline and key(count, "pipeline_cpu_us") in figures:
            done[key(count, "pipeline_ratio")] = figures[key(count, "pipeline_cpu_us")] / pipeline
    return done
