"""The results table (Markdown, printed and written to results/latest.md) and latest.json."""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

from bench import shard_figures
from bench.scaling_figures import cpu_key, scaling_key, worker_counts

RESULTS = Path(__file__).resolve().parent / "results"
#: The peers whose drain rate ours is compared with (the fastest Redis peers).
REDIS_RIVALS = ("huey", "dramatiq")

DURABLE = " (durable: every task state in PostgreSQL)"

Summaries = Mapping[str, Mapping[str, Mapping[str, float]]]


@dataclass(frozen=True, kw_only=True)
class Metric:
    key: str
    label: str
    unit: str
    higher_is_better: bool
    target: str = "—"
    #: Whether ATF's median meets the target, given it and every system's summaries.
    met: Callable[[float, Summaries], bool | None] | None = None
    #: The machine's limit ATF's figure is shown as a share of.
    limit: Limit | None = None


def _at_least(limit: float) -> Callable[[float, Summaries], bool]:
    return lambda value, _all: value >= limit


def _at_most(limit: float) -> Callable[[float, Summaries], bool]:
    return lambda value, _all: value <= limit


def _median(summaries: Summaries, system: str, key: str) -> float | None:
    figure = summaries.get(system, {}).get(key)
    return figure["median"] if figure else None


def _abreast_of_redis_rivals(value: float, summaries: Summaries) -> bool | None:
    """At least the faster drain of Huey and Dramatiq (issue 27's target)."""
    rivals = [m for name in REDIS_RIVALS if (m := _median(summaries, name, "drain"))]
    return value >= max(rivals) if rivals else None


def _no_more_wal_than_procrastinate(value: float, summaries: Summaries) -> bool | None:
    """At most procrastinate's WAL per drained task (issue 27's target)."""
    theirs = _median(summaries, "procrastinate", "cost_drain_wal_bytes")
    return value <= theirs if theirs else None


def _near_direct(value: float, summaries: Summaries) -> bool | None:
    """At least 0.8× ATF's direct drain (issue 27's target)."""
    direct = _median(summaries, "atf", "drain")
    return value >= 0.8 * direct if direct else None


def _abreast_of_direct(value: float, summaries: Summaries) -> bool | None:
    """At least 0.9× ATF's drain without limits (a limit that never binds costs little): the
    median of the back-to-back pairs' quotients where measured, else of the two drains."""
    if ratio := _median(summaries, "atf", "drain_limited_ratio"):
        return ratio >= 0.9
    direct = _median(summaries, "atf", "drain")
    return value >= 0.9 * direct if direct else None


def _near_commit_limit_and_ahead_of_procrastinate(value: float,
                                                  summaries: Summaries) -> bool | None:
    """At least 0.5× the machine's INSERT+COMMIT rate (issue 38's target: two rows and Django's
    own work make issue 27's 0.7× unrealistic) and 1.5×
    procrastinate's (issue 18's), where each was measured."""
    checks = []
    if limit := _median(summaries, MACHINE, "pg_insert_commit"):
        checks.append(value >= 0.5 * limit)
    if theirs := _median(summaries, "procrastinate", "enqueue_single"):
        checks.append(value >= 1.5 * theirs)
    return all(checks) if checks else None


@dataclass(frozen=True, kw_only=True)
class Limit:
    """A limit of the machine (a key of the "machine" results) an ATF figure is shown against."""

    key: str
    label: str
    unit: str
    #: The ATF figure compared with it, and why that one.
    compared: str
    why: str


#: The pseudo-system under which the machine's limits are stored.
MACHINE = "machine"
INSERT_COMMIT = Limit(key="pg_insert_commit", label="PostgreSQL single-row INSERT+COMMIT, "
                      "one connection", unit="/s", compared="enqueue_single",
                      why="a `schedule()` in its own transaction is one committed insert")
UPDATE_ROWS = Limit(key="pg_update_rows", label="PostgreSQL rows of a 1,000-row UPDATE per "
                    "commit", unit="rows/s", compared="drain",
                    why="the drain updates each task's rows in batches (claim, start, finish)")
REDIS_ROUND_TRIP = Limit(key="redis_round_trip", label="Redis LPUSH+BLMPOP round trips, one "
                         "client", unit="/s", compared="drain",
                         why="each task is one push and one pop")
LIMITS = (INSERT_COMMIT, UPDATE_ROWS, REDIS_ROUND_TRIP)


def percent_of_limit(value: float, limit: float) -> str:
    """"74%" for 740 of 1,000; one decimal below 10%."""
    share = 100.0 * value / limit
    return f"{share:.1f}%" if share < 10 else f"{share:.0f}%"


#: PostgreSQL's CPU per drained task before round three (issue 27's first reading, 10,000
#: tasks): its target is not to exceed it.
DRAIN_CPU_BEFORE_US = 225

#: The most a task's CPU (every process together) may grow as worker processes are added, as a
#: multiple of the one-process drain's (issue 38).
SCALING_CPU_LIMIT = 1.25

METRICS = (
    Metric(key="enqueue_single", label="enqueue, one call per task (`schedule()` in its own "
           "transaction)", unit="tasks/s", higher_is_better=True,
           target="≥ 0.5× INSERT+COMMIT limit, ≥ 1.5× procrastinate",
           met=_near_commit_limit_and_ahead_of_procrastinate, limit=INSERT_COMMIT),
    Metric(key="enqueue_vs_commit", label="`schedule()` ÷ INSERT+COMMIT, round by round in one "
           "process (bench/schedule_ratio.py)", unit="×", higher_is_better=True,
           target="≥ 0.5×", met=_at_least(0.5)),
    Metric(key="enqueue_in_txn_ms", label="`schedule()` inside the caller's open transaction",
           unit="ms/call", higher_is_better=False, target="≤ 0.25 ms", met=_at_most(0.25)),
    Metric(key="enqueue_bulk", label="bulk enqueue", unit="tasks/s", higher_is_better=True,
           target="≥ 20,000/s", met=_at_least(20000)),
    Metric(key="rest_single", label="REST, single POST (atf_project.gunicorn_conf)", unit="req/s",
           higher_is_better=True, target="≥ 1,000/s", met=_at_least(1000)),
    Metric(key="rest_batch", label="REST, batch endpoint", unit="tasks/s", higher_is_better=True,
           target="≥ 10,000/s", met=_at_least(10000)),
    Metric(key="drain", label="drain, no-op", unit="tasks/s", higher_is_better=True,
           target="≥ 1.0× the faster of Huey/Dramatiq", met=_abreast_of_redis_rivals,
           limit=REDIS_ROUND_TRIP),
    Metric(key="drain_per_core", label="drain, no-op, a worker process per core "
           "(runworker --processes N)", unit="tasks/s", higher_is_better=True,
           target="≥ 1.0× the faster of Huey/Dramatiq", met=_abreast_of_redis_rivals),
    Metric(key="drain_limited", label="drain, no-op, with a concurrency limit that never "
           "binds (flow control's cost)", unit="tasks/s", higher_is_better=True,
           target="≥ 0.9× ATF's drain", met=_abreast_of_direct),
    Metric(key="drain_limited_ratio", label="drain with that limit ÷ the plain drain beside "
           "it (back-to-back pairs, each order in turn)", unit="×", higher_is_better=True,
           target="≥ 0.9", met=_at_least(0.9)),
    Metric(key="drain_one_process", label="drain, no-op, consumer inside the worker "
           "(runworker --with-consumer)", unit="tasks/s", higher_is_better=True),
    Metric(key="drain_remote", label="drain, no-op, remote worker (runworker --api)",
           unit="tasks/s", higher_is_better=True, target="≥ 0.8× ATF's drain",
           met=_near_direct),
    Metric(key="cost_drain_wal_bytes", label="the store's WAL per drained task", unit="B",
           higher_is_better=False, target="≤ procrastinate's",
           met=_no_more_wal_than_procrastinate),
    Metric(key="cost_drain_cpu_us", label="the store's CPU per drained task (PostgreSQL)",
           unit="µs", higher_is_better=False, target=f"≤ {DRAIN_CPU_BEFORE_US} µs (before "
           "round three)", met=_at_most(DRAIN_CPU_BEFORE_US)),
    *(Metric(key=cpu_key(workers, "ratio"), label=f"drain's CPU per task with {workers} "
             "worker processes, as a multiple of one process's (private PostgreSQL)", unit="×",
             higher_is_better=False, target=f"≤ {SCALING_CPU_LIMIT}×",
             met=_at_most(SCALING_CPU_LIMIT)) for workers in (2, 4)),
    *(Metric(key=shard_figures.key(count, "efficiency"), label=f"sharded store: drain with "
             f"{count} shards ÷ ({count} × one shard's), each a cluster in the same CPU quota",
             unit="×", higher_is_better=True, target=f"≥ {least}", met=_at_least(least))
      for count, least in shard_figures.EFFICIENCY_TARGETS.items()),
    Metric(key=shard_figures.key(3, "pipeline_ratio"), label="sharded store: the pipeline's "
           "CPU per task with 3 shards ÷ one shard's", unit="×", higher_is_better=False,
           target=f"≤ {shard_figures.PIPELINE_CPU_LIMIT}×",
           met=_at_most(shard_figures.PIPELINE_CPU_LIMIT)),
    Metric(key=shard_figures.KILL_RATIO, label="sharded store: the survivors' drain after one "
           "shard's server dies ÷ before", unit="×", higher_is_better=True),
    Metric(key="ramp_s", label="backlog ramp: release of the backlog → full drain speed",
           unit="s", higher_is_better=False, target="≤ 2 s", met=_at_most(2)),
    Metric(key="ramp_steady", label="backlog ramp: steady drain rate", unit="tasks/s",
           higher_is_better=True),
    Metric(key="pg_conns_direct", label="PostgreSQL connections of 32 idle direct workers",
           unit="conns", higher_is_better=False, target="≥ 32 (each its own)"),
    Metric(key="pg_conns_remote", label="PostgreSQL connections of 32 idle remote workers",
           unit="conns", higher_is_better=False, target="0", met=_at_most(0)),
    Metric(key="pg_conns_api", label="PostgreSQL connections of the API serving them",
           unit="conns", higher_is_better=False, target="≤ its pool (2 × 8)", met=_at_most(16)),
    Metric(key="immediate_p50", label="immediate schedule→start p50", unit="ms",
           higher_is_better=False, target="≤ 10 ms", met=_at_most(10)),
    Metric(key="immediate_p95", label="immediate schedule→start p95", unit="ms",
           higher_is_better=False),
    Metric(key="immediate_p99", label="immediate schedule→start p99", unit="ms",
           higher_is_better=False, target="≤ 50 ms", met=_at_most(50)),
    Metric(key="late_p50", label="delivery lateness p50", unit="ms", higher_is_better=False),
    Metric(key="late_p95", label="delivery lateness p95", unit="ms", higher_is_better=False,
           target="≤ 20 ms", met=_at_most(20)),
    Metric(key="late_p99", label="delivery lateness p99", unit="ms", higher_is_better=False,
           target="≤ 100 ms", met=_at_most(100)),
    Metric(key="late_max", label="delivery lateness max", unit="ms", higher_is_better=False),
    Metric(key="isolation_p95", label="isolation, one shared worker: B's lateness p95",
           unit="ms", higher_is_better=False),
    Metric(key="isolation_own_p95", label="isolation, one worker per lambda: B's p95",
           unit="ms", higher_is_better=False, target="≤ 100 ms", met=_at_most(100)),
    Metric(key="rss_worker", label="peak RSS, a worker's processes together", unit="MB",
           higher_is_better=False, target="≤ 90 MB", met=_at_most(90)),
    Metric(key="rss_consumer", label="peak RSS, the consumer", unit="MB", higher_is_better=False),
    Metric(key="rss_total", label="peak RSS, every process that drains together", unit="MB",
           higher_is_better=False, target="≤ 120 MB", met=_at_most(120)),
    Metric(key="rss_one_process", label="peak RSS, runworker --with-consumer (every process "
           "that drains)", unit="MB", higher_is_better=False, target="≤ 120 MB",
           met=_at_most(120)),
)


def _number(value: float, unit: str) -> str:
    if unit in ("ms/call", "×"):
        return f"{value:.2f}"
    if unit in ("ms", "s") and abs(value) < 100:
        return f"{value:.1f}"
    if unit == "MB":
        return f"{value:.0f}"
    return f"{value:,.0f}"


def _cell(summary: Mapping[str, float], unit: str) -> str:
    text = _number(summary["median"], unit)
    if summary["runs"] > 1:
        text += f" ({_number(summary['min'], unit)}–{_number(summary['max'], unit)})"
    return text


def _ratio(ours: float, theirs: float, higher_is_better: bool) -> str:
    """How many times better ATF is (above 1: ATF leads)."""
    if higher_is_better:
        return f"{ours / theirs:.2f}×" if theirs > 0 else "—"
    return f"{theirs / ours:.2f}×" if ours > 0 else "—"


def table(summaries: Summaries, drivers: list[ModuleType]) -> str:
    """One Markdown table: ATF's figures, the target, and each peer with ATF's ratio to it."""
    ours = summaries.get("atf", {})
    peers = [d for d in drivers if d.NAME != "atf"]
    head = ["figure", "target", "ATF", "met?"] + [d.LABEL for d in peers]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for metric in METRICS:
        if not any(metric.key in summaries.get(d.NAME, {}) for d in drivers):
            continue
        mine = ours.get(metric.key)
        verdict = "—"
        if mine is not None and metric.met is not None:
            met = metric.met(mine["median"], summaries)
            verdict = "—" if met is None else ("yes" if met else "**no**")
        mine_cell = _cell(mine, metric.unit) if mine else "—"
        limit = _median(summaries, MACHINE, metric.limit.key) if metric.limit else None
        if mine and limit:
            mine_cell += f" · {percent_of_limit(mine['median'], limit)} of limit"
        row = [f"{metric.label} ({metric.unit})", metric.target, mine_cell, verdict]
        for peer in peers:
            theirs = summaries.get(peer.NAME, {}).get(metric.key)
            if theirs is None:
                row.append("—")
                continue
            cell = _cell(theirs, metric.unit)
            if mine is not None:
                ratio = _ratio(mine["median"], theirs["median"], metric.higher_is_better)
                cell += f" · ATF {ratio}"
            row.append(cell)
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def limits_table(summaries: Summaries) -> str:
    """The machine's limits, and the ATF figure each is compared with as a share of it."""
    machine_figures = summaries.get(MACHINE, {})
    if not machine_figures:
        return ""
    lines = ["| limit of the machine | value | compared with | ATF | ATF's share |",
             "|---|---|---|---|---|"]
    labels = {metric.key: metric.label for metric in METRICS}
    for limit in LIMITS:
        value = machine_figures.get(limit.key)
        if value is None:
            continue
        ours = _median(summaries, "atf", limit.compared)
        lines.append(f"| {limit.label} ({limit.unit}) | {_cell(value, limit.unit)} | "
                     f"{labels[limit.compared]} ({limit.why}) | "
                     f"{_number(ours, 'tasks/s') if ours else '—'} | "
                     f"{percent_of_limit(ours, value['median']) if ours else '—'} |")
    return "\n".join(lines)


def scale_table(summaries: Summaries) -> str:
    """The drain (tasks/s) by worker processes (rows) and consumers (columns)."""
    ours = summaries.get("atf", {})
    cells = {}
    for key, figure in ours.items():
        if key.startswith("scale_w"):
            workers, consumers = key.removeprefix("scale_w").split("_c")
            cells[int(workers), int(consumers)] = _cell(figure, "tasks/s")
    if not cells:
        return ""
    consumers = sorted({c for _w, c in cells})
    lines = ["| worker processes | " + " | ".join(f"{c} consumer{'s' * (c > 1)}"
                                                 for c in consumers) + " |",
             "|---|" + "---|" * len(consumers)]
    for workers in sorted({w for w, _c in cells}):
        lines.append(f"| {workers} | " + " | ".join(cells.get((workers, c), "—")
                                                  for c in consumers) + " |")
    return "\n".join(lines)


def scaling_table(summaries: Summaries) -> str:
    """The drain's rate and CPU per task by process with each count of worker processes
    (columns), their sum, and that sum as a multiple of the one-process drain's."""
    ours = summaries.get("atf", {})
    counts = worker_counts(ours)
    if not counts:
        return ""

    def row(label: str, keys: list[str], unit: str) -> str:
        return f"| {label} | " + " | ".join(
            _cell(ours[key], unit) if key in ours else "—" for key in keys) + " |"

    lines = ["| per drained task | " + " | ".join(
        f"{count} worker process{'es' * (count > 1)}" for count in counts) + " |",
             "|---|" + "---|" * len(counts),
             row("drain (tasks/s)", [scaling_key(count) for count in counts], "tasks/s")]
    for role, label in CPU_ROLES:
        keys = [cpu_key(count, role) for count in counts]
        if any(key in ours for key in keys):
            lines.append(row(f"{label} (µs)", keys, "µs"))
    lines.append(row("**all of them** (µs)", [cpu_key(count, "total") for count in counts],
                     "µs"))
    lines.append(row(f"all of them ÷ one process's (target ≤ {SCALING_CPU_LIMIT}×)",
                     [cpu_key(count, "ratio") for count in counts], "×"))
    return "\n".join(lines)


#: The sharded store's figures of each shard count: part of the key, label, unit.
SHARD_ROWS = (("efficiency", "scaling efficiency: total ÷ (shards × one shard's total)", "×"),
              ("skew", "skew: (fastest − slowest shard) ÷ mean shard", "×"),
              ("pipeline_cpu_us", "pipeline's CPU per task: consumer, workers, Redis", "µs"),
              ("pipeline_ratio", "pipeline's CPU per task ÷ one shard's", "×"),
              ("immediate_p50", "immediate schedule→start p50", "ms"),
              ("immediate_p99", "immediate schedule→start p99", "ms"),
              ("late_p50", "delivery lateness p50", "ms"),
              ("late_p99", "delivery lateness p99", "ms"))
#: Each shard's figures: part of the key, label, unit.
SLOT_ROWS = (("rate", "each shard's drain", "tasks/s"), ("tasks", "each shard's tasks", "tasks"),
             ("pg_cpu_us", "each cluster's PostgreSQL CPU per task of its own", "µs"),
             ("wal_bytes", "each cluster's WAL per task of its own", "B"),
             ("conns", "each cluster's connections from the drain's processes", "conns"),
             ("throttled", "each cluster's time held back by its quota, per second of drain",
              "×"))
SHARD_TITLE = "The sharded store: ATF's drain with each number of shards (each a private " \
    "PostgreSQL cluster in the same CPU quota)"


def shard_table(summaries: Summaries) -> str:
    """The drain by shard count (columns): its total, efficiency, each shard's figures (one
    cell per count, the shards' medians by slot), the pipeline's CPU and the lateness; then
    the survivors' rate around a shard's death."""
    ours = summaries.get("atf", {})
    counts = shard_figures.shard_counts(ours)

    def cell(name: str, unit: str) -> str:
        return _cell(ours[name], unit) if name in ours else "—"

    parts = []
    if counts:
        lines = ["| figure | " + " | ".join(f"{count} shard{'s' * (count > 1)}"
                                           for count in counts) + " |",
                 "|---|" + "---|" * len(counts),
                 "| drain, all shards (tasks/s) | " + " | ".join(
                     cell(shard_figures.rate_key(count), "tasks/s") for count in counts) + " |"]
        for part, label, unit in SHARD_ROWS[:2]:
            lines.append(f"| {label} ({unit}) | " + " | ".join(
                cell(shard_figures.key(count, part), unit) for count in counts) + " |")
        for part, label, unit in SLOT_ROWS:
            lines.append(f"| {label}, by slot ({unit}) | " + " | ".join(" / ".join(
                _number(ours[name]["median"], unit) if (name := shard_figures.slot_key(
                    count, slot, part)) in ours else "—" for slot in range(count))
                for count in counts) + " |")
        for part, label, unit in SHARD_ROWS[2:]:
            lines.append(f"| {label} ({unit}) | " + " | ".join(
                cell(shard_figures.key(count, part), unit) for count in counts) + " |")
        parts.append("\n".join(lines))
    if shard_figures.BASELINE_LAST in ours:
        parts.append("One shard's figures are the mean of its drain before the other counts' "
                     f"({cell(shard_figures.BASELINE_FIRST, 'tasks/s')} tasks/s) and its drain "
                     f"after them ({cell(shard_figures.BASELINE_LAST, 'tasks/s')} tasks/s).")
    if shard_figures.KILL_RATIO in ours:
        shards = _median(summaries, "atf", shard_figures.KILL_SHARDS)
        parts.append(f"One of {shards:.0f} shards' servers stopped once a third of the other "
                     "shards' tasks were done: those shards drained "
                     f"{cell(shard_figures.KILL_BEFORE, 'tasks/s')} tasks/s before and "
                     f"{cell(shard_figures.KILL_AFTER, 'tasks/s')} after "
                     f"({cell(shard_figures.KILL_RATIO, '×')}×).")
    return "\n\n".join(parts)


#: The store-size figures: key, label, unit, target (issue 18's for the hot path on a
#: store of history, issue 33's for the reads).
STORE_FIGURES = (
    ("pass_idle_ms", "consumer pass, nothing due", "ms", "within 10% of empty"),
    ("pass_busy_ms", "consumer pass that enqueues 500 due tasks", "ms", "within 10% of empty"),
    ("claim_ms", "a claim of the 500 tasks that pass enqueued", "ms", "within 10% of empty"),
    ("schedule_ms", "`schedule()` in its own transaction", "ms", "within 10% of empty"),
    ("metrics_p95_ms", "`GET /metrics`, p95", "ms", "≤ 100 ms and ≤ 1.5× empty"),
    ("lambdas_p95_ms", "`GET /api/v1/lambdas/`, p95", "ms", "≤ 100 ms and ≤ 1.5× empty"),
    ("dashboard_p95_ms", "the dashboard's data, p95", "ms", "≤ 100 ms and ≤ 1.5× empty"),
    ("prune_per_s", "retention: tasks pruned per second of pruning (one consumer)", "tasks/s",
     "—"),
    ("prune_wal_bytes", "retention: WAL per pruned task", "B", "—"),
    ("drain", "drain, no-op", "tasks/s", "within 10% of empty"))
#: The backlog's figures: those of the hot path, against the empty table's (with tasks due
#: there is no pass with nothing due).
BACKLOG_FIGURES = tuple(row for row in STORE_FIGURES if row[0] in (
    "pass_busy_ms", "claim_ms", "schedule_ms"))
#: How long generating each size took: key suffix, label.
GENERATED = (("insert_s", "generating the rows (INSERT … SELECT generate_series)"),
             ("vacuum_s", "VACUUM ANALYZE and CHECKPOINT after it"))


def _with_ratio(ours: Mapping[str, Mapping[str, float]], key: str, unit: str) -> str:
    figure, ratio = ours.get(key), ours.get(f"{key}_ratio")
    if not figure:
        return "—"
    return f"{_cell(figure, unit)} ({ratio['median']:.2f}× empty)" if ratio else \
        _cell(figure, unit)


def store_table(summaries: Summaries) -> str:
    """Each store-size figure on the empty table and at each size, with its ratio to empty;
    then how long generating each size took; then the backlog's table."""
    ours = summaries.get("atf", {})
    labels = sorted({key.split("_")[1] for key in ours if key.startswith("store_")
                     and key.endswith("_insert_s") and key.split("_")[1] != "backlog"},
                    key=_size_value)
    if "store_0_drain" not in ours:
        return ""
    lines = ["| figure | empty table | " + " | ".join(f"{label} finished tasks"
                                                    for label in labels) + " | target |",
             "|---|---|" + "---|" * len(labels) + "---|"]
    for key, text, unit, target in STORE_FIGURES:
        lines.append(f"| {text} ({unit}) | {_with_ratio(ours, f'store_0_{key}', unit)} | " +
                     " | ".join(_with_ratio(ours, f"store_{label}_{key}", unit)
                                for label in labels) + f" | {target} |")
    for suffix, text in GENERATED:
        row = [f"{text} (s)", "—"] + [_cell(ours[f"store_{label}_{suffix}"], "s")
                                      for label in labels]
        lines.append("| " + " | ".join(row) + " | — |")
    return "\n".join(lines) + _backlog_table(ours)


def _backlog_table(ours: Mapping[str, Mapping[str, float]]) -> str:
    """The hot path on a store of waiting tasks, and the queue's length against its backlog."""
    if "store_backlog_claim_ms" not in ours:
        return ""
    lines = ["", "", "With a backlog (delayed tasks due in a day, and due tasks):", "",
             "| figure | empty table | backlog | target |", "|---|---|---|---|"]
    for key, text, unit, _target in BACKLOG_FIGURES:
        lines.append(f"| {text} ({unit}) | {_cell(ours[f'store_0_{key}'], unit)} | "
                     f"{_with_ratio(ours, f'store_backlog_{key}', unit)} | ≤ 1.5× empty |")
    per_waiting = ours["store_backlog_queue_per_waiting"]
    lines.append(f"| messages in the queue per task waiting in it "
                 f"({_number(ours['store_backlog_queue_queued']['median'], '')} messages, "
                 f"{_number(ours['store_backlog_queue_waiting']['median'], '')} tasks) | — | "
                 f"{per_waiting['median']:.3f} | ≤ 1.01 |")
    for suffix, text in GENERATED:
        lines.append(f"| {text} (s) | — | {_cell(ours[f'store_backlog_{suffix}'], 's')} | — |")
    return "\n".join(lines)


def pace_table(summaries: Summaries) -> str:
    """What `retention_pace` measured: the rate, and the most finished tasks seen past their
    retention against one minute's tasks (target: at most one minute's)."""
    ours = summaries.get("atf", {})
    if "pace_past_max" not in ours:
        return ""
    rows = [("tasks scheduled", "pace_scheduled", ""),
            ("tasks finished a second", "pace_finished_per_s", "tasks/s"),
            ("most tasks not finished at a count", "pace_waiting_max", ""),
            ("most finished tasks past their retention at a count", "pace_past_max", "")]
    lines = ["| figure | ATF |", "|---|---|"]
    lines += [f"| {text} | {_cell(ours[key], unit)} |" for text, key, unit in rows]
    share = ours["pace_past_per_minute"]["median"]
    lines.append(f"| … as a share of one minute's tasks (target ≤ 1) | {share:.3f} |")
    return "\n".join(lines)


#: The store-cost counters (per task): key suffix, label, digits shown.
COST_COUNTERS = (("statements", "statements", 2), ("commits", "commits", 2),
                 ("rows_inserted", "rows inserted", 2), ("rows_updated", "rows updated", 2),
                 ("rows_hot", "of which HOT (no index touched)", 2),
                 ("rows_deleted", "rows deleted", 2), ("wal_bytes", "WAL bytes", 0),
                 ("wal_records", "WAL records", 1), ("wal_fpi", "WAL full-page images", 2),
                 ("cpu_us", "PostgreSQL CPU (µs)", 0))
COST_TITLE = "The store’s cost of one task (a private PostgreSQL cluster per system)"
#: Dropbox's ATF scheduled this many tasks a second: the rate the estimate is made for.
DROPBOX_RATE = 9_000


def cost_table(summaries: Summaries, drivers: list[ModuleType]) -> str:
    """Per task and phase, what each PostgreSQL-backed system cost its server."""
    systems = [d for d in drivers if "cost_drain_cpu_us" in summaries.get(d.NAME, {})]
    if not systems:
        return ""
    head = ["per task"] + [f"{d.LABEL} {phase}" for d in systems for phase in ("enqueue",
                                                                              "drain")]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key, label, digits in COST_COUNTERS:
        row = [label]
        for driver in systems:
            for phase in ("enqueue", "drain"):
                value = _median(summaries, driver.NAME, f"cost_{phase}_{key}")
                row.append("—" if value is None else f"{value:,.{digits}f}")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n\n" + wal_relations_table(summaries) + cost_estimate(summaries)


#: How many of ATF's tables and indexes the WAL split names (the rest are summed).
WAL_RELATIONS_SHOWN = 12


def wal_relations_table(summaries: Summaries) -> str:
    """Where ATF's WAL goes: bytes per task by table or index, drain and enqueue."""
    ours = summaries.get("atf", {})
    by_relation: dict[str, dict[str, float]] = {}
    for key, figure in ours.items():
        if key.startswith("walrel_"):
            phase, relation = key.removeprefix("walrel_").split(":", 1)
            by_relation.setdefault(relation, {})[phase] = figure["median"]
    if not by_relation:
        return ""
    ranked = sorted(by_relation, key=lambda r: -by_relation[r].get("drain", 0.0))
    lines = ["| ATF's WAL bytes per task, by table or index | enqueue | drain |",
             "|---|---|---|"]
    shown, rest = ranked[:WAL_RELATIONS_SHOWN], ranked[WAL_RELATIONS_SHOWN:]
    for relation in shown:
        lines.append(f"| {relation} | {by_relation[relation].get('enqueue', 0):,.0f} | "
                     f"{by_relation[relation].get('drain', 0):,.0f} |")
    if rest:
        lines.append(f"| {len(rest)} others | "
                     f"{sum(by_relation[r].get('enqueue', 0) for r in rest):,.0f} | "
                     f"{sum(by_relation[r].get('drain', 0) for r in rest):,.0f} |")
    return "\n".join(lines) + "\n\n"


def cost_estimate(summaries: Summaries) -> str:
    """How many tasks/s one PostgreSQL primary carries at ATF's measured cost per task."""
    cpu = [_median(summaries, "atf", f"cost_{phase}_cpu_us") for phase in ("enqueue", "drain")]
    wal = [_median(summaries, "atf", f"cost_{phase}_wal_bytes") for phase in ("enqueue", "drain")]
    if None in cpu or None in wal:
        return ""
    cpu_us, wal_bytes = sum(c for c in cpu if c), sum(w for w in wal if w)
    per_core = 1e6 / cpu_us
    return (f"At ATF's cost, a task (enqueued and drained) takes {cpu_us:,.0f} µs of "
            f"PostgreSQL CPU and writes {wal_bytes:,.0f} bytes of WAL: one server core carries "
            f"about {per_core:,.0f} tasks/s, so {DROPBOX_RATE:,} tasks/s needs about "
            f"{DROPBOX_RATE / per_core:.1f} cores of PostgreSQL and "
            f"{DROPBOX_RATE * wal_bytes / 1e6:.0f} MB/s of WAL.\n")


#: The processes whose CPU a drain samples, in the order the CPU table shows them.
CPU_ROLES = (("worker", "worker processes"), ("consumer", "consumer"),
             ("api", "API (gunicorn), for the remote worker"), ("postgres", "PostgreSQL server"),
             ("redis", "Redis server"))
CPU_TITLE = "CPU per drained task, by process (µs)"
SCALING_TITLE = "ATF's drain and its CPU per task by worker processes (one consumer, private " \
    "PostgreSQL)"


def cpu_table(summaries: Summaries, drivers: list[ModuleType]) -> str:
    """For each drain, the CPU each process used per task, their sum, and the drain that sum
    allows on this machine's cores (every core busy with nothing else): what a drain's rate
    is made of."""
    columns = [(d.LABEL, d.NAME, "drain") for d in drivers
               if "cpu_drain_worker" in summaries.get(d.NAME, {})]
    if "cpu_drain_per_core_worker" in summaries.get("atf", {}):
        columns.append(("ATF, a worker process per core", "atf", "drain_per_core"))
    if "cpu_drain_remote_worker" in summaries.get("atf", {}):
        columns.append(("ATF, remote worker", "atf", "drain_remote"))
    if not columns:
        return ""
    lines = ["| per drained task | " + " | ".join(label for label, _n, _f in columns) + " |",
             "|---|" + "---|" * len(columns)]
    totals = []
    for role, label in CPU_ROLES:
        values = [_median(summaries, name, f"cpu_{figure}_{role}") for _l, name, figure in columns]
        if any(values):
            lines.append(f"| {label} | " + " | ".join(
                "—" if value is None else f"{value:,.0f}" for value in values) + " |")
    for _label, name, figure in columns:
        totals.append(sum(_median(summaries, name, f"cpu_{figure}_{role}") or 0.0
                          for role, _l in CPU_ROLES))
    cores = os.cpu_count() or 1
    lines.append("| **all of them** | " + " | ".join(f"**{t:,.0f}**" for t in totals) + " |")
    lines.append(f"| drain those allow on {cores} cores (tasks/s) | " + " | ".join(
        f"{cores * 1e6 / t:,.0f}" if t else "—" for t in totals) + " |")
    lines.append("| drain measured (tasks/s) | " + " | ".join(
        f"{m:,.0f}" if (m := _median(summaries, name, figure)) else "—"
        for _l, name, figure in columns) + " |")
    return "\n".join(lines)


def size_label(size: int) -> str:
    """1000000 -> "1M", 100000 -> "100k", 0 -> "0": how a store size is named in keys."""
    for unit, name in ((1_000_000, "M"), (1_000, "k")):
        if size >= unit and size % unit == 0:
            return f"{size // unit}{name}"
    return str(size)


def _size_value(label: str) -> int:
    """"10M" -> 10000000 (the inverse of size_label)."""
    scale = {"M": 1_000_000, "k": 1_000}.get(label[-1], 1)
    return int(label.rstrip("Mk")) * scale


def machine() -> dict[str, Any]:
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return {"nproc": os.cpu_count(), "memory_gib": round(pages / 2**30, 1),
            "python": platform.python_version(), "system": platform.platform()}


def _section(title: str, body: str) -> str:
    return f"### {title}\n\n{body}\n\n" if body else ""


def write(summaries: Summaries, drivers: list[ModuleType], *, plan: Mapping[str, Any],
          notes: list[str], results: Path = RESULTS) -> str:
    """Write latest.json and latest.md into `results`; return the Markdown."""
    results.mkdir(parents=True, exist_ok=True)
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    box = machine()
    options = "\n".join(f"- **{d.LABEL}**{DURABLE if d.DURABLE else ''}: {d.OPTIONS}"
                        for d in drivers)
    markdown = (
        f"Benchmark of {now} on {box['nproc']} cores, {box['memory_gib']} GiB "
        f"({box['system']}, Python {box['python']}); {plan['repeats']} repetition(s), "
        "median (min–max). A peer's cell shows its figure and how many times better ATF is "
        "(above 1× ATF leads).\n\n"
        f"{table(summaries, drivers)}\n\n"
        f"{_section('The machine’s own limits (one client)', limits_table(summaries))}"
        f"{_section('Scale curve: ATF drain (tasks/s) by processes', scale_table(summaries))}"
        f"{_section(SCALING_TITLE, scaling_table(summaries))}"
        f"{_section(SHARD_TITLE, shard_table(summaries))}"
        f"{_section('Store size: ATF with finished tasks in the table', store_table(summaries))}"
        f"{_section('Retention at the pace of the drain (ATF)', pace_table(summaries))}"
        f"{_section(CPU_TITLE, cpu_table(summaries, drivers))}"
        f"{_section(COST_TITLE, cost_table(summaries, drivers))}"
        f"How each system was configured:\n\n{options}\n\n"
        f"Sizes: {', '.join(f'{k}={v}' for k, v in plan.items())}.\n"
    )
    if notes:
        markdown += "\nNotes:\n\n" + "\n".join(f"- {note}" for note in notes) + "\n"
    (results / "latest.md").write_text(markdown)
    document = {"date": now, "machine": box, "plan": dict(plan), "notes": notes,
                "systems": {d.NAME: {"label": d.LABEL, "options": d.OPTIONS,
                                     "durable": d.DURABLE} for d in drivers},
                "limits": {limit.key: {"label": limit.label, "compared": limit.compared}
                           for limit in LIMITS},
                "results": summaries}
    (results / "latest.json").write_text(json.dumps(document, indent=2) + "\n")
    return markdown
