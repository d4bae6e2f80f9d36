"""ATF's cost as the work grows: the scale curve, the backlog ramp and the store size.

Each measurement takes one system and returns {metric: value}, like those of bench.measure;
for a system other than ATF it returns nothing.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import time
from datetime import UTC, datetime

from bench import report, services, stats, store_rows
from bench.drivers.base import ROOT
from bench.measure import Plan, Target, drain_with
from bench.procs import Fleet

logger = logging.getLogger(__name__)

#: Width of the windows in which the backlog ramp counts started tasks, seconds.
RAMP_WINDOW_S = 0.5
#: Full speed: a window at this fraction of the steady rate or more.
RAMP_FRACTION = 0.9
#: Seconds between the end of the backlog's insert and the moment it falls due, at least.
RELEASE_MARGIN_S = 5.0
#: Lambda of the generated finished tasks.
GENERATED_LAMBDA = "demo.noop"
#: Where the store-size run writes the plans of the hot statements.
PLANS = report.RESULTS / "plans.md"


def _is_atf(target: Target) -> bool:
    return target.name == "atf"


def scale_key(workers: int, consumers: int) -> str:
    return f"scale_w{workers}_c{consumers}"


def scaled_fleet(target: Target, workers: int, consumers: int) -> Fleet:
    """`workers` runworker processes of the main drain's thread count, and `consumers`."""
    consumer, worker = target.driver.worker_commands(target.env)
    return Fleet(target.name, [consumer] * consumers + [worker] * workers)


def scale_curve(target: Target, plan: Plan) -> dict[str, float]:
    """The drain with each number of worker processes and consumers (ATF)."""
    if not _is_atf(target):
        return {}
    return {scale_key(w, c): drain_with(target, plan, scaled_fleet(target, w, c))
            for w in plan.scale_workers for c in plan.scale_consumers}


def backlog_ramp(target: Target, plan: Plan) -> dict[str, float]:
    """Seconds from the moment `ramp_n` tasks fall due at once until the running workers
    drain at full speed, and that steady rate (ATF).

    The backlog is scheduled with one `run_at` a little ahead, while no worker runs; the
    workers start and warm up, the tasks fall due together, and the drain is watched for
    `ramp_observe_s`.
    """
    if not _is_atf(target):
        return {}
    target.reset()
    release = time.time() + RELEASE_MARGIN_S + plan.ramp_n / 4000
    target.produce(task="record", key="ramp", n=plan.ramp_n, mode="release", run_at=release)
    if time.time() > release - 1:
        raise RuntimeError("the backlog took longer to insert than its release margin")
    with target.fleet() as fleet:
        target.warm_up(fleet, timeout_s=plan.wait_s)
        if time.time() > release:
            target.notes.append("atf: the ramp's workers were warm only after its release")
        while time.time() < release + plan.ramp_observe_s:
            fleet.check_alive()
            time.sleep(0.2)
    starts = [start for _due, start, _end in target.driver.records(target.redis, "ramp")]
    end = min(release + plan.ramp_observe_s, max(starts, default=release))
    rates = stats.window_rates(starts, begin=release, end=end, window_s=RAMP_WINDOW_S)
    ramp_s, steady = stats.ramp_seconds(rates, window_s=RAMP_WINDOW_S, fraction=RAMP_FRACTION)
    return {"ramp_s": ramp_s, "ramp_steady": steady}


def _probe(target: Target, *args: str) -> dict:
    """Run `python -m bench.atf_probe ARGS` in ATF's venv; its JSON answer."""
    done = subprocess.run([target.python(), "-m", "bench.atf_probe", *args], cwd=ROOT,
                          env={**os.environ, **target.driver.variables(target.env)},
                          capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"atf_probe {' '.join(args)} failed: {done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _figures_at(target: Target, plan: Plan, size: int) -> dict[str, float]:
    """Pass time, `schedule()` in its own transaction, and the drain, with `size` finished
    tasks (ids 1..size) in the table; each measurement's own tasks are deleted after it."""
    store_rows.forget_above(target.env.pg_dsn, size)
    passes = _probe(target, "pass", str(plan.pass_rounds), str(plan.pass_due))
    store_rows.forget_above(target.env.pg_dsn, size)
    services.flush(target.env.redis_url)
    seconds = target.produce(task="record", key="enq", n=plan.store_schedule_n, mode="burst")
    store_rows.forget_above(target.env.pg_dsn, size)
    drained = drain_with(target, plan, target.fleet(), keep_rows=True)
    store_rows.forget_above(target.env.pg_dsn, size)
    return {"pass_idle_ms": passes["idle_ms"], "pass_busy_ms": passes["busy_ms"],
            "schedule_ms": seconds / plan.store_schedule_n * 1000, "drain": drained}


def _write_plans(plans: dict[str, str], size: int) -> None:
    """The hot statements' plans at `size` finished tasks, to results/plans.md."""
    body = "\n\n".join(f"### {name}\n\n```\n{plan}\n```" for name, plan in plans.items())
    PLANS.write_text(
        f"# Plans of the hot statements with {size:,} finished tasks in the table\n\n"
        f"Written by `python -m bench.run` (measurement `store_size`), "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC: `EXPLAIN (ANALYZE, BUFFERS)` of each "
        "prepared statement as ten tasks go through a consumer pass (due, mark_enqueued), a "
        "claim, a start and a finish; each statement is explained with its real parameters "
        "and rolled back just before it runs.\n\n" + body + "\n")


def store_size(target: Target, plan: Plan) -> dict[str, float]:
    """The figures above on an empty table, then with each of `store_sizes` finished tasks
    (generated once per run, each size adding to the last), each also as a ratio of the
    empty table's; the plans of the hot statements at the largest size go to
    results/plans.md. Every row is dropped at the end."""
    if not _is_atf(target):
        return {}
    target.reset()
    figures: dict[str, float] = {}
    generated = 0
    try:
        empty = _figures_at(target, plan, 0)
        figures.update({f"store_0_{key}": value for key, value in empty.items()})
        for size in plan.store_sizes:
            made = store_rows.generate(target.env.pg_dsn, lambda_name=GENERATED_LAMBDA,
                                       first=generated + 1, last=size)
            generated = size
            label = report.size_label(size)
            figures[f"store_{label}_insert_s"] = made["insert_s"]
            figures[f"store_{label}_vacuum_s"] = made["vacuum_s"]
            logger.info("store size %s: inserted in %.0f s, vacuumed in %.0f s", label,
                        made["insert_s"], made["vacuum_s"])
            for key, value in _figures_at(target, plan, size).items():
                figures[f"store_{label}_{key}"] = value
                figures[f"store_{label}_{key}_ratio"] = value / empty[key]
        if plan.store_sizes:
            _write_plans(_probe(target, "explain"), plan.store_sizes[-1])
    finally:
        target.reset()
    return figures
