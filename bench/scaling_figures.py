"""The figures of the drain-scaling measurement (`bench.drain_scaling`): their keys, and the
totals and ratios derived from each drain's CPU per task by process. Pure: it starts nothing
and reads no server, so the report and the unit tests use it without the bench's services."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

#: The worker count the others are compared with.
BASELINE_WORKERS = 1
_RATE = re.compile(r"scaling_w(\d+)")


def scaling_key(workers: int) -> str:
    """`scaling_w4`: the drain rate with 4 worker processes. Its CPU per task is under
    `cpu_scaling_w4_<role>` by process, `..._total` for their sum and `..._ratio` for that
    sum over the one-process drain's."""
    return f"scaling_w{workers}"


def worker_counts(keys: Iterable[str]) -> list[int]:
    """The worker counts whose drain rate is among `keys`, in ascending order."""
    return sorted(int(found[1]) for key in keys if (found := _RATE.fullmatch(key)))


def cpu_key(workers: int, part: str) -> str:
    """`cpu_scaling_w4_worker`, `cpu_scaling_w4_total`, `cpu_scaling_w4_ratio`."""
    return f"cpu_{scaling_key(workers)}_{part}"


def with_totals(figures: Mapping[str, float], workers: Iterable[int]) -> dict[str, float]:
    """`figures` with each drain's total CPU per task (the sum of its processes') and, where
    the one-process drain was measured, each total as a ratio of that one's."""
    done = dict(figures)
    counts = list(workers)
    for count in counts:
        prefix = cpu_key(count, "")
        done[cpu_key(count, "total")] = sum(value for key, value in figures.items()
                                            if key.startswith(prefix))
    baseline = done.get(cpu_key(BASELINE_WORKERS, "total"))
    if baseline:
        for count in counts:
            done[cpu_key(count, "ratio")] = done[cpu_key(count, "total")] / baseline
    return done
