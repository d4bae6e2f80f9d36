"""How long a run will take, printed before it starts.

From each system's rates in the last full run on the 2-core reference box (rounded), the
sizes of the plan and a fixed cost per started fleet (start-up, warm-up, the stop's grace).
A rough guide, not a promise: a loaded machine takes longer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench.measure import Plan

#: Tasks per second: one enqueue call per task, the bulk API (None: none), the drain.
ENQUEUE = {"atf": 800, "celery": 2000, "rq": 2100, "dramatiq": 4000, "huey": 5800,
           "procrastinate": 950, "djtasks": 1100}
BULK = {"atf": 8000, "rq": 9000, "procrastinate": 8000}
DRAIN = {"atf": 1300, "celery": 900, "rq": 100, "dramatiq": 3700, "huey": 1600,
         "procrastinate": 520, "djtasks": 80}
#: Systems whose tasks live in PostgreSQL (the store-cost measurement runs only those).
POSTGRES_STORES = {"atf", "procrastinate", "djtasks"}
#: Systems that started none of lambda B's tasks behind lambda A's backlog last time.
STARVED_IN_ISOLATION = {"rq", "djtasks"}
#: Seconds to start, warm up and stop one system's processes.
FLEET_S = 10.0
#: Generating finished tasks (rows of the three tables, indexes in place), tasks/s, and the
#: VACUUM ANALYZE after it.
GENERATE_PER_S = 35_000
VACUUM_PER_S = 100_000

#: Seconds to create a private PostgreSQL cluster, migrate it and remove it.
PRIVATE_CLUSTER_S = 20.0
#: ATF's drain per core of a shard's CPU quota, tasks/s (the sharded store's measurements).
SHARD_DRAIN_PER_CORE = 2000

Estimator = Callable[["Plan", str], float]


def _backlog_s(system: str, n: int) -> float:
    return n / BULK.get(system, ENQUEUE[system])


def _drain_s(plan: Plan, system: str) -> float:
    return _backlog_s(system, plan.drain_n) + plan.drain_n / DRAIN[system] + FLEET_S


def _isolation_s(plan: Plan, system: str) -> float:
    waits = 2 * plan.none_started_s if system in STARVED_IN_ISOLATION else plan.b_seconds
    return _backlog_s(system, plan.backlog_n) + FLEET_S + waits


def _latency_s(plan: Plan, system: str) -> float:
    return (FLEET_S + plan.immediate_n / plan.immediate_rate + plan.delayed_n / ENQUEUE[system]
            + plan.delay_max_s)


def _shard_drain_s(plan: Plan, system: str, shards: int) -> float:
    """A drain over `shards` new clusters in their quotas (without quotas: at the plain drain's
    rate), their set-up included."""
    rate = SHARD_DRAIN_PER_CORE * plan.shard_cpu * shards if plan.shard_cpu else DRAIN[system]
    return PRIVATE_CLUSTER_S * shards + _backlog_s(system, plan.drain_n) + FLEET_S + \
        plan.drain_n / rate


def _shard_scaling_s(plan: Plan, system: str) -> float:
    """Each count's drain and lateness; one shard's drain and lateness again at the end where
    other counts are measured (bench.shard_figures.baseline_twice)."""
    counts = list(plan.shard_counts)
    if 1 in counts and len(counts) > 1:
        counts.append(1)
    return sum(_shard_drain_s(plan, system, shards) + _latency_s(plan, system)
               for shards in counts)


def _shard_kill_s(plan: Plan, system: str) -> float:
    shards = max(plan.shard_counts)
    return _shard_drain_s(plan, system, shards) if shards > 1 else 0.0


def _store_size_s(plan: Plan, system: str) -> float:
    per_size = (2 * plan.pass_rounds * 0.05 + 5 + plan.store_schedule_n / ENQUEUE[system]
                + _drain_s(plan, system))
    largest = max(plan.store_sizes, default=0)
    return (per_size * (1 + len(plan.store_sizes)) + largest / GENERATE_PER_S
            + largest / VACUUM_PER_S)


def _atf_only(estimator: Estimator) -> Estimator:
    return lambda plan, system: estimator(plan, system) if system == "atf" else 0.0


def machine_limits_s(plan: Plan) -> float:
    return plan.limit_inserts / 1000 + plan.limit_updated_rows / 50_000 + \
        plan.limit_round_trips / 8000 + 2


#: Seconds of one repetition of each measurement for one system.
PER_SYSTEM: dict[str, Estimator] = {
    "enqueue_single": lambda plan, system: plan.enqueue_n / ENQUEUE[system] + 3,
    "enqueue_in_transaction": _atf_only(lambda plan, _s: plan.in_transaction_n * 0.002 + 3),
    # Five rounds of a tenth of enqueue_n each way, at about 1,000 calls a second; Django's start.
    "enqueue_vs_commit": _atf_only(lambda plan, _s: plan.enqueue_n * 0.001 + 5),
    "enqueue_bulk": lambda plan, system: plan.enqueue_n / BULK[system] + 3 if system in BULK
    else 0.0,
    "rest": _atf_only(lambda plan, _s: plan.rest_single_n / 220 + plan.rest_batch_n / 5000
                      + FLEET_S),
    "drain": _drain_s,
    "drain_per_core": _atf_only(_drain_s),
    "drain_limited": _atf_only(_drain_s),
    "drain_one_process": _atf_only(_drain_s),
    "drain_remote": _atf_only(lambda plan, s: _backlog_s(s, plan.drain_n) + plan.drain_n / 300
                              + 2 * FLEET_S),
    "connections": _atf_only(lambda _plan, _s: 60.0),
    "latency": _latency_s,
    "isolation": _isolation_s,
    "isolation_per_lambda": _atf_only(_isolation_s),
    "backlog_ramp": _atf_only(lambda plan, s: _backlog_s(s, plan.ramp_n) + 5 + FLEET_S
                              + plan.ramp_observe_s),
    "scale_curve": _atf_only(lambda plan, s: _drain_s(plan, s) * len(plan.scale_workers)
                             * len(plan.scale_consumers)),
    "drain_cpu_scaling": _atf_only(lambda plan, s: PRIVATE_CLUSTER_S + _drain_s(plan, s)
                                   * len(plan.scale_workers)),
    "store_size": _atf_only(_store_size_s),
    "shard_scaling": _atf_only(_shard_scaling_s),
    "shard_kill": _atf_only(_shard_kill_s),
    "retention_pace": _atf_only(lambda plan, s: plan.pace_seconds + 2 * FLEET_S),
    "store_cost_per_task": lambda plan, system: (
        plan.cost_n / ENQUEUE[system] + plan.cost_n / DRAIN[system] + 2 * FLEET_S
        if system in POSTGRES_STORES else 0.0),
}


def seconds(plan: Plan, systems: Iterable[str], measurements: Iterable[str], *,
            once: Iterable[str]) -> float:
    """The whole run: each measurement `plan.repeats` times (those in `once` one time) for
    every system, plus the machine's limits once per repetition."""
    systems, once = list(systems), set(once)
    total = 0.0
    for name in measurements:
        if name == "machine_limits":
            total += plan.repeats * machine_limits_s(plan)
            continue
        repeats = 1 if name in once else plan.repeats
        total += repeats * sum(PER_SYSTEM[name](plan, system) for system in systems)
    return total
