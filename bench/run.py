"""Run the side-by-side benchmark: `python -m bench.run [--quick] [--systems atf,huey,...]`.

Runs in the peers' virtualenv (bench/.venv-peers); ATF's producers and processes run from the
project's .venv. Each measurement interleaves the systems (A B C A B C …) over the
repetitions; the table reports the median and min–max.
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

from bench import drivers, measure, report, services, stats
from bench.drivers.base import REDIS_DB, Env

logger = logging.getLogger("bench")

FULL = measure.Plan(repeats=3, enqueue_n=20_000, rest_single_n=5_000, rest_batch_n=20_000,
                    drain_n=20_000, drain_timeout_s=300, immediate_n=200, immediate_rate=20,
                    delayed_n=2_000, delay_min_s=5, delay_max_s=25, backlog_n=100_000,
                    b_rate=5, b_seconds=12, wait_s=180)
QUICK = measure.Plan(repeats=1, enqueue_n=2_000, rest_single_n=1_000, rest_batch_n=5_000,
                     drain_n=2_000, drain_timeout_s=60, immediate_n=60, immediate_rate=20,
                     delayed_n=500, delay_min_s=2, delay_max_s=8, backlog_n=10_000,
                     b_rate=5, b_seconds=6, wait_s=60)


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__)
    parser.add_argument("--quick", action="store_true",
                        help="small counts and one repetition (a smoke run, noisy figures)")
    parser.add_argument("--systems", default=",".join(drivers.NAMES),
                        help=f"comma-separated subset of {','.join(drivers.NAMES)}")
    parser.add_argument("--only", default="",
                        help="comma-separated measurements to run (default: all of "
                             f"{','.join(m.__name__ for m in measure.MEASUREMENTS)})")
    parser.add_argument("--repeats", type=int, help="repetitions (default 3, --quick 1)")
    parser.add_argument("--backlog", type=int, help="isolation: size of lambda A's backlog")
    parser.add_argument("--tasks", type=int, help="enqueue and drain: number of tasks")
    parser.add_argument("--redis-url", default="",
                        help="a Redis server whose databases 1-7 the bench may flush "
                             "(default: start a private redis-server)")
    parser.add_argument("--pg-url", default="postgresql://postgres@127.0.0.1:5432",
                        help="PostgreSQL server; the bench creates databases bench_<system>")
    return parser.parse_args(argv)


def _plan(args: argparse.Namespace) -> measure.Plan:
    plan = QUICK if args.quick else FULL
    changes: dict[str, int] = {}
    if args.repeats:
        changes["repeats"] = args.repeats
    if args.backlog:
        changes["backlog_n"] = args.backlog
    if args.tasks:
        changes.update(enqueue_n=args.tasks, drain_n=args.tasks)
    return dataclasses.replace(plan, **changes)


def _targets(names: list[str], redis_url: str, pg_url: str) -> list[measure.Target]:
    targets = []
    for name in names:
        driver = drivers.load(name)
        dsn = services.ensure_database(pg_url, f"bench_{name}")
        env = Env(name=name, redis_url=f"{redis_url}/{REDIS_DB[name]}", pg_dsn=dsn)
        # A driver whose set-up is not idempotent (procrastinate's schema) runs it only once.
        once = getattr(driver, "SETUP_ONCE", False)
        if not (once and services.has_tables(dsn, driver.SCHEMA)):
            for command in driver.setup_commands(env):
                measure.run_once(command)
        targets.append(measure.Target(driver=driver, env=env))
    return targets


def run(args: argparse.Namespace, redis_url: str) -> str:
    plan = _plan(args)
    names = [n for n in args.systems.split(",") if n]
    unknown = set(names) - set(drivers.NAMES)
    if unknown:
        raise SystemExit(f"unknown systems: {', '.join(sorted(unknown))}")
    chosen = [m for m in measure.MEASUREMENTS
              if not args.only or m.__name__ in args.only.split(",")]
    targets = _targets(names, redis_url, args.pg_url)
    load_at_start = os.getloadavg()[0]
    values: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    notes: list[str] = []
    for measurement in chosen:
        for repetition in range(plan.repeats):
            for target in targets:
                began = time.monotonic()
                try:
                    figures = measurement(target, plan)
                except Exception as exc:  # one system's failure must not end the whole run
                    logger.exception("%s of %s failed", measurement.__name__, target.name)
                    notes.append(f"{target.name}: {measurement.__name__} failed: {exc}"[:300])
                    continue
                for key, value in figures.items():
                    values[target.name][key].append(value)
                logger.info("%s #%d %s: %s (%.0f s)", measurement.__name__, repetition + 1,
                            target.name, {k: round(v, 1) for k, v in figures.items()},
                            time.monotonic() - began)
    notes += [note for target in targets for note in target.notes]
    notes.append(f"Load average (1 min) {load_at_start:.1f} at the start and "
                 f"{os.getloadavg()[0]:.1f} at the end, on {os.cpu_count()} cores: a load "
                 "above the core count means other work shared the machine.")
    summaries = {name: {key: stats.summary(series) for key, series in metrics.items()}
                 for name, metrics in values.items()}
    return report.write(summaries, [t.driver for t in targets],
                        plan=dataclasses.asdict(plan), notes=notes)


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
