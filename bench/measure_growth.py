"""ATF's cost as the work grows: the scale curve, the backlog ramp and the store size.

Each measurement takes one system and returns {metric: value}, like those of bench.measure;
for a system other than ATF it returns nothing.
"""

from __future__ import annotations

import dataclasses
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
#: The reads' figures (bench.atf_probe reads) kept at each store size.
READS = ("metrics_p95_ms", "lambdas_p95_ms", "dashboard_p95_ms")
#: The generated history spans this long, ending now: a week, ATF's default retention, so
#: that the reads' windows (the dashboard's hour, /metrics' five minutes) hold the share of it
#: that a store finishing that many tasks a week holds (20M: 33 tasks a second).
HISTORY_SPAN_S = 7 * 86_400.0
#: Retention at each size prunes finished tasks older than this: the oldest tenth of them.
PRUNE_AGE_S = 0.9 * HISTORY_SPAN_S
#: The backlog's delayed tasks fall due this long after they are made (never, in the run).
DELAYED_BY_S = 86_400.0
#: The backlog's due tasks fell due this long before they are made.
DUE_SINCE_S = 3_600.0
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


#: Longest a probe may run, past what it is asked to take itself.
PROBE_TIMEOUT_S = 1800.0


def run_probe(target: Target, *args: str, takes_s: float = 0.0, **environment: str) -> dict:
    """Run `python -m bench.atf_probe ARGS` in ATF's venv (with `environment` added; `takes_s`:
    the seconds it is asked to run, on top of its timeout); its JSON answer."""
    done = subprocess.run([target.python(), "-m", "bench.atf_probe", *args], cwd=ROOT,
                          env={**os.environ, **target.driver.variables(target.env),
                               **environment},
                          capture_output=True, text=True, timeout=PROBE_TIMEOUT_S + takes_s,
                          check=False)
    if done.returncode != 0:
        raise RuntimeError(f"atf_probe {' '.join(args)} failed: {done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _figures_at(target: Target, plan: Plan, size: int) -> dict[str, float]:
    """Pass time, a claim, `schedule()` in its own transaction, the three reads, retention
    (above 0) and the drain, with `size` finished tasks (ids 1..size) in the table; each
    measurement's own tasks are deleted after it."""
    figures = _hot_path(target, plan, size)
    reads = run_probe(target, "reads", str(plan.read_rounds))
    figures.update({key: reads[key] for key in READS})
    if size:
        pruned = run_probe(target, "prune", str(plan.prune_rounds), str(PRUNE_AGE_S))
        figures["prune_per_s"] = pruned["per_s_pruning"]
        figures["prune_wal_bytes"] = pruned["wal_bytes_per_task"]
    drained = drain_with(target, plan, target.fleet(), keep_rows=True)
    store_rows.forget_above(target.env.pg_dsn, size)
    return {**figures, "drain": drained}


def _hot_path(target: Target, plan: Plan, generated: int) -> dict[str, float]:
    """The consumer pass (idle and busy), the claim and `schedule()`, with `generated` tasks
    made by bench.store_rows in the table (they stay; the measurements' own are deleted)."""
    store_rows.forget_above(target.env.pg_dsn, generated)
    passes = run_probe(target, "pass", str(plan.pass_rounds), str(plan.pass_due))
    store_rows.forget_above(target.env.pg_dsn, generated)
    services.flush(target.env.redis_url)
    seconds = target.produce(task="record", key="enq", n=plan.store_schedule_n, mode="burst")
    store_rows.forget_above(target.env.pg_dsn, generated)
    return {"pass_idle_ms": passes["idle_ms"], "pass_busy_ms": passes["busy_ms"],
            "claim_ms": passes["claim_ms"],
            "schedule_ms": seconds / plan.store_schedule_n * 1000}


def _plans_section(plans: dict[str, str], title: str) -> str:
    body = "\n\n".join(f"### {name}\n\n```\n{plan}\n```" for name, plan in plans.items())
    return f"## {title}\n\n{body}\n"


def _write_plans(sections: list[str]) -> None:
    """The hot statements' plans (one section a store), to results/plans.md."""
    PLANS.write_text(
        "# Plans of the hot statements in a store of history and in a store of backlog\n\n"
        f"Written by `python -m bench.run` (measurement `store_size`), "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC: `EXPLAIN (ANALYZE, BUFFERS)` of each "
        "of the store's own statements as ten tasks go through a consumer pass (due, "
        "mark_enqueued), a claim, a start and a finish; each statement is explained with its "
        "real parameters and rolled back just before it runs.\n\n" + "\n".join(sections))


def store_size(target: Target, plan: Plan) -> dict[str, float]:
    """The figures above on an empty table, then with each of `store_sizes` finished tasks
    (generated once per run, each size adding to the last), each also as a ratio of the
    empty table's; the plans of the hot statements at the largest size go to
    results/plans.md; then the backlog (`_backlog`), and its plans. Every row is dropped at
    the end.

    The empty table is measured twice, first and last (`store_emptyfirst_*`,
    `store_emptylast_*`), and `store_0_*` is their mean, which the ratios divide by: a
    store's figures are taken between the two, so a machine that got faster or slower over
    the run's minutes moves both sides of a ratio alike (one empty measurement at the start
    made the same store read 2.4× empty in one run and 0.65× in the next)."""
    if not _is_atf(target):
        return {}
    target.reset()
    stores: dict[str, dict[str, float]] = {}  # label -> its raw figures
    plans: list[str] = []
    generated = 0
    try:
        first = _figures_at(target, plan, 0)
        for size in plan.store_sizes:
            made = store_rows.generate(target.env.pg_dsn, lambda_name=GENERATED_LAMBDA,
                                       first=generated + 1, last=size, span_s=HISTORY_SPAN_S)
            generated = size
            label = report.size_label(size)
            _log_made(f"store size {label}", made)
            # What a consumer running while they finished would have folded (atf_probe rollup).
            logger.info("store size %s: rollup made in %.0f s", label,
                        run_probe(target, "rollup")["seconds"])
            stores[label] = {**made, **_figures_at(target, plan, size)}
        if plan.store_sizes:
            plans.append(_plans_section(run_probe(target, "explain"),
                                        f"With {plan.store_sizes[-1]:,} finished tasks"))
        target.reset()
        if plan.backlog_delayed or plan.backlog_due:
            stores["backlog"] = _backlog(target, plan, plans)
        target.reset()
        last = _figures_at(target, plan, 0)
    finally:
        target.reset()
    if plans:
        _write_plans(plans)
    empty = {key: (first[key] + last[key]) / 2 for key in first.keys() & last.keys()}
    figures = {**_labelled("emptyfirst", first), **_labelled("emptylast", last),
               **_labelled("0", empty)}
    for label, values in stores.items():
        figures.update(_labelled(label, values, empty))
    return figures


def _backlog(target: Target, plan: Plan, plans: list[str]) -> dict[str, float]:
    """On a store of `backlog_delayed` tasks due in a day and `backlog_due` tasks due an hour
    ago: the hot path's figures (a busy pass takes the earliest due of the backlog); the plans
    (added to `plans`); and the queue's length against its backlog after `queue_seconds` of
    passes that nobody's claims follow (`bench.atf_probe queue`)."""
    dsn, delayed, due = target.env.pg_dsn, plan.backlog_delayed, plan.backlog_due
    made = store_rows.generate_waiting(dsn, lambda_name=GENERATED_LAMBDA, first=1,
                                       last=delayed, due_in_s=DELAYED_BY_S)
    made_due = store_rows.generate_waiting(dsn, lambda_name=GENERATED_LAMBDA,
                                           first=delayed + 1, last=delayed + due,
                                           due_in_s=-DUE_SINCE_S)
    made = {key: made[key] + made_due[key] for key in made}
    _log_made("backlog", made)
    generated = delayed + due
    figures = {**made, **_hot_path(target, plan, generated)}
    plans.append(_plans_section(run_probe(target, "explain"), (
        f"With {delayed:,} delayed tasks and {due:,} due (less those the measurements took)")))
    services.flush(target.env.redis_url)
    queued = run_probe(target, "queue", str(plan.queue_seconds),
                    ATF_ENQUEUE_TIMEOUT_S=str(plan.queue_enqueue_timeout_s))
    return {**figures, **{f"queue_{key}": value for key, value in queued.items()}}


def _labelled(label: str, values: dict[str, float], empty: dict[str, float] | None = None,
              ) -> dict[str, float]:
    """`values` under `store_<label>_<key>`; with `empty`, the ratio of each one it also has
    to it too."""
    figures = {f"store_{label}_{key}": value for key, value in values.items()}
    for key in (empty or {}).keys() & values.keys():
        figures[f"store_{label}_{key}_ratio"] = values[key] / empty[key]
    return figures


def _log_made(what: str, made: dict[str, float]) -> None:
    logger.info("%s: inserted in %.0f s, vacuumed in %.0f s", what, made["insert_s"],
                made["vacuum_s"])


def retention_pace(target: Target, plan: Plan) -> dict[str, float]:
    """Whether retention keeps pace with the drain: `pace_rate` tasks a second for
    `pace_seconds`, drained by the plain fleet whose consumer prunes what finished more than
    `pace_retention_s` ago (`bench.atf_probe pace`)."""
    if not _is_atf(target):
        return {}
    target.reset()
    retention = {"ATF_RETENTION_S": str(plan.pace_retention_s)}
    fleet = Fleet(target.name, [dataclasses.replace(command, env={**command.env, **retention})
                                for command in target.driver.worker_commands(target.env)])
    try:
        with fleet:
            paced = run_probe(target, "pace", str(plan.pace_seconds), str(plan.pace_rate),
                           str(plan.pace_retention_s), takes_s=plan.pace_seconds, **retention)
    finally:
        target.reset()
    return {f"pace_{key}": value for key, value in paced.items()}
