"""Run the side-by-side benchmark: `python -m bench.run [--quick] [--systems atf,huey,...]`.

Runs in the peers' virtualenv (bench/.venv-peers); ATF's producers and processes run from the
project's .venv. Each measurement interleaves the systems (A B C A B C …) over the
repetitions; the table reports the median and min–max. The machine's own limits are measured
first, once per repetition; the scale curve and the store size once per run.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import os
import signal
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from bench import (
    cpu_quota,
    drain_scaling,
    drivers,
    estimate,
    limits,
    measure,
    measure_growth,
    report,
    schedule_ratio,
    services,
    shard_scaling,
    stats,
)
from bench.drivers.base import REDIS_DB, Env

logger = logging.getLogger("bench")

FULL = measure.Plan(repeats=3, enqueue_n=20_000, rest_single_n=5_000, rest_batch_n=20_000,
                    drain_n=20_000, drain_timeout_s=300, immediate_n=300, immediate_rate=20,
                    delayed_n=2_000, delay_min_s=3, delay_max_s=15, backlog_n=100_000,
                    b_rate=5, b_seconds=12, wait_s=180)
QUICK = measure.Plan(repeats=1, enqueue_n=2_000, rest_single_n=1_000, rest_batch_n=5_000,
                     drain_n=2_000, drain_timeout_s=60, immediate_n=60, immediate_rate=20,
                     delayed_n=500, delay_min_s=2, delay_max_s=8, backlog_n=10_000,
                     b_rate=5, b_seconds=6, wait_s=60, in_transaction_n=1_000, ramp_n=10_000,
                     ramp_observe_s=6, store_sizes=(100_000,), store_schedule_n=500,
                     pass_rounds=5, read_rounds=5, prune_rounds=3, backlog_delayed=100_000,
                     backlog_due=10_000, queue_seconds=8.0, pace_seconds=60.0,
                     pace_retention_s=20.0, limit_inserts=1_000,
                     limit_updated_rows=10_000,
                     limit_round_trips=2_000, cost_n=2_000)

#: The default systems. RQ and django-tasks-db stay selectable (`--systems`); they are left
#: out by default because their slow drains kept a full run well over an hour (figures:
#: docs/benchmarks.md).
DEFAULT_SYSTEMS = ("atf", "celery", "dramatiq", "huey", "procrastinate")
#: The machine's limits, measured once per repetition before the systems.
MACHINE_LIMITS = "machine_limits"
#: Every measurement, in the order they run.
MEASUREMENTS = (*measure.MEASUREMENTS, schedule_ratio.enqueue_vs_commit,
                measure_growth.backlog_ramp, measure_growth.scale_curve,
                drain_scaling.drain_cpu_scaling, measure_growth.store_size)
#: Measurements run only when asked for (named in `--only`, or `--shards` given without it;
#: the kill only where a count is above 1): they start a PostgreSQL cluster per shard, each in
#: a CPU quota (root, cgroup v1).
ON_REQUEST = (shard_scaling.shard_scaling, shard_scaling.shard_kill,
              measure_growth.retention_pace)
#: Measurements that make stores of their own (the shards' clusters), not the system's database.
OWN_STORES = (shard_scaling.shard_scaling, shard_scaling.shard_kill)
#: Measurements run once per run, not once per repetition (their sizes are generated once,
#: or they only draw a curve, or they run for half an hour).
ONCE = ("scale_curve", "store_size", "retention_pace")
#: Redis database of the machine's limits on the bench's own server.
LIMITS_REDIS_DB = 8


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__)
    parser.add_argument("--quick", action="store_true",
                        help="small counts and one repetition (a smoke run, noisy figures)")
    parser.add_argument("--systems", default=",".join(DEFAULT_SYSTEMS),
                        help=f"comma-separated subset of {','.join(drivers.NAMES)} "
                             f"(default {','.join(DEFAULT_SYSTEMS)})")
    parser.add_argument("--only", default="",
                        help="comma-separated measurements to run (default: all of "
                             f"{','.join([MACHINE_LIMITS, *(m.__name__ for m in MEASUREMENTS)])}"
                             f"; on request: {','.join(m.__name__ for m in ON_REQUEST)})")
    parser.add_argument("--shards", default="",
                        help="the sharded store (ATF): comma-separated shard counts to drain "
                             "(default 1,2,3); without --only, runs "
                             f"{' and '.join(m.__name__ for m in ON_REQUEST)} alone (the "
                             "kill where a count is above 1)")
    parser.add_argument("--shard-cpu", type=float,
                        help="the sharded store: each shard's CPU quota in cores (default "
                             f"{measure.Plan.shard_cpu}; 0: no quota, on a machine of many "
                             "cores)")
    parser.add_argument("--repeats", type=int, help="repetitions (default 3, --quick 1)")
    parser.add_argument("--pace-seconds", type=float,
                        help="retention_pace: how long the drain runs (default "
                             f"{measure.Plan.pace_seconds:.0f}, --quick 60)")
    parser.add_argument("--backlog", type=int, help="isolation: size of lambda A's backlog")
    parser.add_argument("--tasks", type=int, help="enqueue and drain: number of tasks")
    parser.add_argument("--store-sizes", default="",
                        help="store size: comma-separated counts of finished tasks "
                             "(default 1000000,10000000; --quick 100000)")
    parser.add_argument("--redis-url", default="",
                        help="a Redis server whose databases 1-8 the bench may flush "
                             "(default: start a private redis-server)")
    parser.add_argument("--pg-url", default="postgresql://postgres@127.0.0.1:5432",
                        help="PostgreSQL server; the bench creates databases bench_<system>")
    parser.add_argument("--results", type=Path, default=report.RESULTS,
                        help="where latest.md and latest.json go (default bench/results)")
    parser.add_argument("--db-prefix", default="bench",
                        help="name the databases <prefix>_<system> instead (two runs at once "
                             "on one server must not share ATF's tables)")
    return parser.parse_args(argv)


def _plan(args: argparse.Namespace) -> measure.Plan:
    plan = QUICK if args.quick else FULL
    changes: dict[str, object] = {}
    if args.repeats:
        changes["repeats"] = args.repeats
    if args.backlog:
        changes["backlog_n"] = args.backlog
    if args.tasks:
        changes.update(enqueue_n=args.tasks, drain_n=args.tasks)
    if args.pace_seconds:
        changes["pace_seconds"] = args.pace_seconds
    if args.store_sizes:
        changes["store_sizes"] = tuple(sorted(int(n) for n in args.store_sizes.split(",")))
    if args.shards:
        changes["shard_counts"] = _shard_counts(args.shards)
    if args.shard_cpu is not None:
        if args.shard_cpu < 0:
            raise SystemExit(f"--shard-cpu: a number of cores (0: no quota), not "
                             f"{args.shard_cpu}")
        changes["shard_cpu"] = args.shard_cpu
    return dataclasses.replace(plan, **changes)


def _shard_counts(text: str) -> tuple[int, ...]:
    """"1,2,3" -> (1, 2, 3); SystemExit with one line for anything but positive whole
    numbers."""
    try:
        counts = tuple(sorted({int(part) for part in text.split(",")}))
    except ValueError:
        counts = ()
    if not counts or counts[0] < 1:
        raise SystemExit(f"--shards: comma-separated shard counts of 1 or more, not {text!r}")
    return counts


def _require_shards(plan: measure.Plan, targets: list[measure.Target]) -> None:
    """SystemExit with one line where the shard measurements cannot run here: no CPU quotas,
    or more than one shard asked of ATF code without shard support."""
    if plan.shard_cpu and not cpu_quota.available():
        raise SystemExit("the shard measurements need root and the cgroup v1 cpu hierarchy "
                         f"at {cpu_quota.HIERARCHY} (each shard's CPU quota)")
    shards = max(plan.shard_counts)
    for target in targets:
        if target.name == "atf" and shards > 1:
            try:
                shard_scaling.require_support(target, shards)
            except shard_scaling.ShardsUnsupported as exc:
                raise SystemExit(f"--shards {shards}: {exc}") from None


def _targets(names: list[str], redis_url: str, pg_url: str, plan: measure.Plan, *,
             prefix: str, set_up: bool = True) -> list[measure.Target]:
    """The systems, each with its database on `pg_url` made and set up (`set_up`: the
    measurements chosen use it; those of OWN_STORES do not)."""
    targets = []
    for name in names:
        driver = drivers.load(name)
        dsn = (services.ensure_database(pg_url, f"{prefix}_{name}") if set_up
               else f"{pg_url}/{prefix}_{name}")
        env = Env(name=name, redis_url=f"{redis_url}/{REDIS_DB[name]}", pg_dsn=dsn)
        # A driver whose set-up is not idempotent (procrastinate's schema) runs it only once.
        once = getattr(driver, "SETUP_ONCE", False)
        if set_up and not (once and services.has_tables(dsn, driver.SCHEMA)):
            for command in driver.setup_commands(env):
                measure.run_once(command)
        targets.append(measure.Target(driver=driver, env=env,
                                      none_started_s=plan.none_started_s))
    return targets


def _machine_limits(plan: measure.Plan, redis_url: str, pg_url: str,
                    database: str) -> dict[str, float]:
    return limits.measure(services.ensure_database(pg_url, database),
                          f"{redis_url}/{LIMITS_REDIS_DB}",
                          limits.LimitSizes(inserts=plan.limit_inserts,
                                            updated_rows=plan.limit_updated_rows,
                                            redis_round_trips=plan.limit_round_trips))


class Runner:
    """Runs the chosen measurements and gathers their figures, notes and the load."""

    def __init__(self, plan: measure.Plan, targets: list[measure.Target], redis_url: str,
                 pg_url: str, *, prefix: str) -> None:
        self.plan, self.targets = plan, targets
        self.redis_url, self.pg_url, self.prefix = redis_url, pg_url, prefix
        self.values: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        self.notes: list[str] = []
        #: 1-minute load average at the start of each run of each measurement.
        self.loads: dict[str, list[float]] = defaultdict(list)

    def machine_limits(self) -> None:
        for repetition in range(self.plan.repeats):
            self._one(MACHINE_LIMITS, report.MACHINE, repetition, lambda: _machine_limits(
                self.plan, self.redis_url, self.pg_url, f"{self.prefix}_limits"))

    def measure(self, measurement: Callable[[measure.Target, measure.Plan], dict[str, float]]
                ) -> None:
        name = measurement.__name__
        for repetition in range(1 if name in ONCE else self.plan.repeats):
            for target in self.targets:
                self._one(name, target.name, repetition,
                          lambda target=target: measurement(target, self.plan))

    def _one(self, name: str, system: str, repetition: int,
             figures_of: Callable[[], dict[str, float]]) -> None:
        began = time.monotonic()
        self.loads[name].append(os.getloadavg()[0])
        try:
            figures = figures_of()
        except Exception as exc:  # one system's failure must not end the whole run
            logger.exception("%s of %s failed", name, system)
            self.notes.append(f"{system}: {name} failed: {exc}"[:300])
            return
        for key, value in figures.items():
            self.values[system][key].append(value)
        if figures:
            logger.info("%s #%d %s: %s (%.0f s, load %.1f)", name, repetition + 1, system,
                        {k: round(v, 2) for k, v in figures.items()},
                        time.monotonic() - began, os.getloadavg()[0])

    def load_note(self) -> str:
        return "Load average (1 min) at the start of each measurement, min–max: " + ", ".join(
            f"{name} {min(loads):.1f}–{max(loads):.1f}" for name, loads in self.loads.items())


def run(args: argparse.Namespace, redis_url: str) -> str:
    plan = _plan(args)
    names = [n for n in args.systems.split(",") if n]
    unknown = set(names) - set(drivers.NAMES)
    if unknown:
        raise SystemExit(f"unknown systems: {', '.join(sorted(unknown))}")
    only = [n for n in args.only.split(",") if n]
    if args.shards and not only:  # a shard kill needs a shard to survive it
        only = ["shard_scaling", *["shard_kill"] * (max(plan.shard_counts) > 1)]
    known = {MACHINE_LIMITS, *(m.__name__ for m in (*MEASUREMENTS, *ON_REQUEST))}
    if unknown := set(only) - known:
        raise SystemExit(f"unknown measurements: {', '.join(sorted(unknown))}")
    chosen = [m for m in (*MEASUREMENTS, *ON_REQUEST)
              if m.__name__ in only or (not only and m in MEASUREMENTS)]
    with_limits = not only or MACHINE_LIMITS in only
    planned = [MACHINE_LIMITS] * with_limits + [m.__name__ for m in chosen]
    logger.info("estimated duration: about %.1f minutes (%s on %s)",
                estimate.seconds(plan, names, planned, once=ONCE) / 60, ", ".join(planned),
                ", ".join(names))
    targets = _targets(names, redis_url, args.pg_url, plan, prefix=args.db_prefix,
                       set_up=any(m not in OWN_STORES for m in chosen))
    if any(m in OWN_STORES for m in chosen):
        _require_shards(plan, targets)
    runner = Runner(plan, targets, redis_url, args.pg_url, prefix=args.db_prefix)
    load_at_start, started = os.getloadavg()[0], time.monotonic()
    if with_limits:
        runner.machine_limits()
    for measurement in chosen:
        runner.measure(measurement)
    notes = runner.notes + [note for target in runner.targets for note in target.notes]
    notes.append(f"Load average (1 min) {load_at_start:.1f} at the start and "
                 f"{os.getloadavg()[0]:.1f} at the end, on {os.cpu_count()} cores: a load "
                 "above the core count means other work shared the machine. The run took "
                 f"{(time.monotonic() - started) / 60:.1f} minutes.")
    notes.append(runner.load_note())
    summaries = {name: {key: stats.summary(series) for key, series in metrics.items()}
                 for name, metrics in runner.values.items()}
    return report.write(summaries, [t.driver for t in runner.targets],
                        plan=dataclasses.asdict(plan), notes=notes, results=args.results)


def _exit_on_signal(signum: int, _frame: object) -> None:
    # Unwind the with-blocks, so every worker and server the bench started is stopped.
    raise SystemExit(128 + signum)


def main(argv: list[str]) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    signal.signal(signal.SIGTERM, _exit_on_signal)
    args = _arguments(argv)
    with contextlib.ExitStack() as stack:
        redis_url = args.redis_url.rstrip("/") or stack.enter_context(services.PrivateRedis())
        sys.stdout.write(run(args, redis_url))


if __name__ == "__main__":
    main(sys.argv[1:])
