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


def _at_least(limit: float) -> Callable[[float, Summaries], bool]:
    return lambda value, _all: value >= limit


def _at_most(limit: float) -> Callable[[float, Summaries], bool]:
    return lambda value, _all: value <= limit


def _beats_redis_rivals(value: float, summaries: Summaries) -> bool | None:
    rivals = [summaries[name]["drain"]["median"] for name in REDIS_RIVALS
              if "drain" in summaries.get(name, {})]
    return value >= max(rivals) if rivals else None


def _half_of_direct(value: float, summaries: Summaries) -> bool | None:
    direct = summaries.get("atf", {}).get("drain")
    return value >= 0.5 * direct["median"] if direct else None


METRICS = (
    Metric(key="enqueue_single", label="enqueue, one call per task", unit="tasks/s",
           higher_is_better=True, target="≥ 2,000/s", met=_at_least(2000)),
    Metric(key="enqueue_bulk", label="bulk enqueue", unit="tasks/s", higher_is_better=True,
           target="≥ 20,000/s", met=_at_least(20000)),
    Metric(key="rest_single", label="REST, single POST (gunicorn -w 2)", unit="req/s",
           higher_is_better=True, target="≥ 1,000/s", met=_at_least(1000)),
    Metric(key="rest_batch", label="REST, batch endpoint", unit="tasks/s", higher_is_better=True),
    Metric(key="drain", label="drain, no-op", unit="tasks/s", higher_is_better=True,
           target="≥ 1.0× Huey/Dramatiq", met=_beats_redis_rivals),
    Metric(key="drain_remote", label="drain, no-op, remote worker (runworker --api)",
           unit="tasks/s", higher_is_better=True, target="≥ 0.5× ATF's drain",
           met=_half_of_direct),
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
    Metric(key="late_p50", label="delivery lateness p50", unit="ms", higher_is_better=False),
    Metric(key="late_p95", label="delivery lateness p95", unit="ms", higher_is_better=False,
           target="≤ 50 ms", met=_at_most(50)),
    Metric(key="late_p99", label="delivery lateness p99", unit="ms", higher_is_better=False,
           target="≤ 100 ms", met=_at_most(100)),
    Metric(key="late_max", label="delivery lateness max", unit="ms", higher_is_better=False),
    Metric(key="isolation_p95", label="isolation: B's lateness p95", unit="ms",
           higher_is_better=False, target="≤ 100 ms", met=_at_most(100)),
    Metric(key="isolation_own_p95", label="isolation, one worker per lambda: B's p95",
           unit="ms", higher_is_better=False, target="≤ 100 ms", met=_at_most(100)),
    Metric(key="rss_worker", label="peak RSS, a worker's processes together", unit="MB",
           higher_is_better=False, target="≤ 90 MB", met=_at_most(90)),
    Metric(key="rss_consumer", label="peak RSS, the consumer", unit="MB", higher_is_better=False),
)


def _number(value: float, unit: str) -> str:
    if unit == "ms" and abs(value) < 100:
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
        row = [f"{metric.label} ({metric.unit})", metric.target,
               _cell(mine, metric.unit) if mine else "—", verdict]
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


def machine() -> dict[str, Any]:
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return {"nproc": os.cpu_count(), "memory_gib": round(pages / 2**30, 1),
            "python": platform.python_version(), "system": platform.platform()}


def write(summaries: Summaries, drivers: list[ModuleType], *, plan: Mapping[str, Any],
          notes: list[str]) -> str:
    """Write latest.json and latest.md; return the Markdown."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    box = machine()
    options = "\n".join(f"- **{d.LABEL}**{DURABLE if d.DURABLE else ''}: {d.OPTIONS}"
                        for d in drivers)
    markdown = (
        f"Benchmark of {now} on {box['nproc']} cores, {box['memory_gib']} GiB "
        f"({box['system']}, Python {box['python']}); {plan['repeats']} repetition(s), "
        "median (min–max). A peer's cell shows its figure and how many times better ATF is "
        "(above 1× ATF leads).\n\n"
        f"{table(summaries, drivers)}\n\nHow each system was configured:\n\n{options}\n\n"
        f"Sizes: {', '.join(f'{k}={v}' for k, v in plan.items())}.\n"
    )
    if notes:
        markdown += "\nNotes:\n\n" + "\n".join(f"- {note}" for note in notes) + "\n"
    (RESULTS / "latest.md").write_text(markdown)
    document = {"date": now, "machine": box, "plan": dict(plan), "notes": notes,
                "systems": {d.NAME: {"label": d.LABEL, "options": d.OPTIONS,
                                     "durable": d.DURABLE} for d in drivers},
                "results": summaries}
    (RESULTS / "latest.json").write_text(json.dumps(document, indent=2) + "\n")
    return markdown
