"""The dashboard's content: numbers from `tasks_core.stats`, drawn as SVG charts."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from django.urls import reverse
from django.utils.safestring import SafeString

from tasks_console import charts, display, gates, latency
from tasks_console.display import STATUS_COLOURS
from tasks_core import liveness, stats
from tasks_core.access import Scope
from tasks_core.conf import atf_settings
from tasks_core.exceptions import QueueUnavailable
from tasks_core.models import Collection, Lambda
from tasks_core.states import TaskStatus

logger = logging.getLogger(__name__)

#: The dashboard looks back this far.
WINDOW_S = 3600.0
PRIORITY_COLOURS = ("#b0281a", "#417690", "#8a8f98", "#6a5acd", "#2e8540")


def _minutes(now: datetime) -> list[datetime]:
    last = now.replace(second=0, microsecond=0)
    return [last - timedelta(minutes=n) for n in range(int(WINDOW_S // 60) - 1, -1, -1)]


def _task_list(**query: object) -> str:
    params = "&".join(f"{key}={value}" for key, value in query.items())
    return f"{reverse('admin:tasks_core_taskentity_changelist')}?{params}"


def _status_chart(counts: dict[str, int]) -> SafeString:
    rows = [charts.Bar(label=status.value, value=counts.get(status, 0),
                       colour=STATUS_COLOURS[status], href=_task_list(status__exact=status.value))
            for status in TaskStatus]
    return charts.bars(rows, title="Tasks per status")


def _queue_chart(depths: dict[str, dict[str, int]] | None) -> SafeString:
    if depths is None:
        return charts.empty("Queue depth", "queue service unreachable")
    colours = dict(zip(atf_settings.priorities, PRIORITY_COLOURS, strict=False))
    rows = [charts.Bar(label=f"{name} · {priority}", value=depth,
                       colour=colours.get(priority, "#417690"))
            for name, by_priority in depths.items() for priority, depth in by_priority.items()
            if depth]
    return charts.bars(rows, title="Queue depth per lambda and priority") if rows else \
        charts.empty("Queue depth", "all queues are empty")


def _queue_depths(lambda_names: list[str]) -> dict[str, dict[str, int]] | None:
    try:
        return stats.queue_depths(lambda_names)
    except QueueUnavailable as exc:
        logger.warning("queue depths unavailable: %s", exc)
        return None


def _failure_chart(failures: dict[str, int], lambda_ids: dict[str, int]) -> SafeString:
    rows = [charts.Bar(label=name, value=n, colour="#b0281a",
                       href=_task_list(**{"lambda": lambda_ids.get(name, "")}))
            for name, n in sorted(failures.items(), key=lambda item: -item[1])]
    return charts.bars(rows, title="Failures per lambda") if rows else \
        charts.empty("Failures per lambda", "no failures in the last hour")


def _gated(user: Any, now: datetime) -> list[dict[str, Any]]:
    """Closed gates the user can see, with the tasks each holds back."""
    rows: list[Lambda | Collection] = [
        *Scope.of(user).lambdas().exclude(gate="open"),
        *Scope.of(user).filter(
            Collection.objects.exclude(gate="open").select_related("lambda_ref"),
            "lambda_ref__team"),
    ]
    return [{"name": str(gates.GateTarget.of(row)), "gate": gates.describe(row, now),
             "held_back": gates.due_count(gates.GateTarget.of(row), now),
             "url": reverse(f"admin:tasks_core_{row._meta.model_name}_change", args=[row.pk])}
            for row in rows if gates.is_closed(row, now)]


def build(user: Any, now: datetime) -> dict[str, Any]:
    """Everything the dashboard page shows, for `user`'s teams."""
    lambda_rows = dict(Scope.of(user).lambdas().values_list("name", "pk"))
    lambda_ids = None if Scope.of(user).every_team else list(lambda_rows.values())
    since = now - timedelta(seconds=WINDOW_S)
    # The parts of stats.snapshot() the page shows (it skips the per-lambda status counts,
    # a second pass over the whole task table).
    counts = stats.status_counts(lambda_ids=lambda_ids)
    failures = stats.failures_by_lambda(since=since, lambda_ids=lambda_ids)
    minutes = _minutes(now)
    labels = [f"{m:%H:%M}" for m in minutes]
    # One series for the throughput chart's bars and the card's average: the same 60 minutes.
    done = dict(stats.throughput(since=minutes[0], lambda_ids=lambda_ids))
    finished = [done.get(m, 0) for m in minutes]
    # The latency cards and chart: one read, of those 60 minutes too.
    overall, lat = latency.window(since=minutes[0], lambda_ids=lambda_ids)
    workers = Scope.of(user).workers(liveness.live_workers(now=now))
    names = Scope.of(user).lambda_names()
    return {
        "now": now,
        "cards": [
            ("live workers", len(workers)),
            ("finished / min (1 h)", charts.number(sum(finished) / len(minutes))),
            ("latency p50", _seconds(overall.p50_s)),
            ("latency p95", _seconds(overall.p95_s)),
            ("dead letters", counts.get(TaskStatus.DEAD, 0)),
            ("failures (1 h)", sum(failures.values())),
        ],
        "charts": {
            "status": _status_chart(counts),
            "queues": _queue_chart(_queue_depths(list(lambda_rows))),
            "throughput": charts.lines(
                [charts.Series(name="finished per minute", colour="#417690",
                               values=finished)],
                labels, title="Throughput per minute", columns=True),
            "latency": charts.lines(
                [charts.Series(name="p50", colour="#2e8540",
                               values=[lat[m][0] if m in lat else None for m in minutes]),
                 charts.Series(name="p95", colour="#d9822b",
                               values=[lat[m][1] if m in lat else None for m in minutes])],
                labels, title="Delivery latency per minute", unit="s"),
            "failures": _failure_chart(failures, lambda_rows),
        },
        "workers": [{"worker_id": w.worker_id, "threads": w.threads, "last_seen": w.last_seen,
                     "lambdas": display.worker_lambdas(w, names)} for w in workers[:50]],
        "gated": _gated(user, now),
    }


def _seconds(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.1f} s"
