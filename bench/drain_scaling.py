"""The drain's CPU per task as worker processes are added (ATF; issue 38).

With 1, 2 and 4 `runworker` processes (each of the main drain's thread count) and one
consumer, as the bench runs them, ATF drains `drain_n` tasks; each drain gives its rate and
the CPU per task of each kind of process (the worker processes together, the consumer,
PostgreSQL, Redis), their sum, and that sum as a ratio of the one-process drain's of the
same repetition. Adding processes must not make a task dearer: the target is at most 1.25×.

The store is a private PostgreSQL cluster (`bench.private_postgres`), so that the server's
CPU is ATF's alone even where other work shares the machine's PostgreSQL; Redis is the
bench's own server.
"""

from __future__ import annotations

from bench.measure import Plan, Target, cpu_per_task, drain_rate, drained_rows, watch_servers
from bench.measure_growth import scaled_fleet
from bench.private_postgres import private_target
from bench.scaling_figures import scaling_key, with_totals

#: The drains' consumers: one, as every other drain of the bench.
CONSUMERS = 1


def drain_cpu_scaling(target: Target, plan: Plan) -> dict[str, float]:
    """The drain and its CPU per task with each of `plan.scale_workers` worker processes, on a
    private cluster (ATF)."""
    if target.name != "atf":
        return {}
    figures: dict[str, float] = {}
    with private_target(target, f"scaling_{target.name}") as (here, _data):
        for workers in plan.scale_workers:
            fleet = watch_servers(here, scaled_fleet(here, workers, CONSUMERS))
            rows = drained_rows(here, plan, fleet)
            figures[scaling_key(workers)] = drain_rate(rows)
            figures.update(cpu_per_task([fleet], rows, scaling_key(workers)))
    return with_totals(figures, plan.scale_workers)
