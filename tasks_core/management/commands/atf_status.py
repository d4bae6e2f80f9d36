"""`manage.py atf_status [--once] [--interval S] [--window S] [--lambda NAME ...]`."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError
from django.utils import timezone

from tasks_core import liveness, stats
from tasks_core.conf import atf_settings
from tasks_core.contrib import cli
from tasks_core.models import Lambda
from tasks_core.states import TaskStatus

#: Columns of the lambda table: heading and the statuses it adds up.
COLUMNS: list[tuple[str, tuple[TaskStatus, ...]]] = [
    ("NEW", (TaskStatus.NEW,)),
    ("WAITING", (TaskStatus.WAITING,)),
    ("ENQUEUED", (TaskStatus.ENQUEUED,)),
    ("RUNNING", (TaskStatus.CLAIMED, TaskStatus.PROCESSING)),
    ("RETRYING", (TaskStatus.RETRYING,)),
    ("SUCCESS", (TaskStatus.SUCCESS,)),
    ("FATAL", (TaskStatus.FATAL_FAILURE,)),
    ("DEAD", (TaskStatus.DEAD,)),
]
CLEAR = "\x1b[H\x1b[2J"


class Command(BaseCommand):
    help = (
        "A live view of ATF: queue depths per lambda and priority, tasks per status, "
        "throughput, delivery latency and workers, refreshed every few seconds (Ctrl-C quits)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        cli.examples(parser, "atf_status", "atf_status --once --lambda billing.send_invoice")
        parser.add_argument("--once", action="store_true", help="print one view and exit")
        parser.add_argument("--interval", type=cli.duration_s, default=2.0, metavar="SECONDS",
                            help="seconds between two refreshes (default 2)")
        parser.add_argument("--window", type=cli.duration_s, default=300.0, metavar="SECONDS",
                            help="recent window for throughput, latency and failures "
                                 "(default 300 = 5m)")
        parser.add_argument("--lambda", dest="lambdas", action="append", metavar="NAME",
                            help="show only this lambda (repeatable)")

    def handle(self, *args: Any, once: bool, interval: float, window: float,
               lambdas: list[str] | None, **options: Any) -> None:
        lambda_ids = None
        if lambdas:
            found = dict(Lambda.objects.filter(name__in=lambdas).values_list("name", "pk"))
            if missing := sorted(set(lambdas) - set(found)):
                raise CommandError(f"unknown lambda(s): {', '.join(missing)}")
            lambda_ids = list(found.values())
        live = not once and self.stdout.isatty()
        try:
            while True:
                view = self.render(window_s=window, lambda_ids=lambda_ids)
                self.stdout.write((CLEAR if live else "") + view)
                if once:
                    return
                time.sleep(interval)
        except KeyboardInterrupt:
            return
        except DatabaseError as exc:
            raise CommandError(f"the task store cannot be read: {exc}") from exc

    def render(self, *, window_s: float, lambda_ids: list[int] | None) -> str:
        """The whole view as text."""
        now = timezone.now()
        snap = stats.snapshot(now=now, window_s=window_s, lambda_ids=lambda_ids)
        latency = snap.latency
        lat = ("-" if latency.p50_s is None else
               f"p50 {latency.p50_s:.3f}s  p95 {latency.p95_s:.3f}s  p99 {latency.p99_s:.3f}s")
        header = (f"ATF status at {now:%Y-%m-%d %H:%M:%S} UTC   live workers: {snap.live_workers}"
                  f"\nlast {window_s:g}s: {snap.per_minute:.1f} tasks/min finished, "
                  f"delivery latency {lat}")
        return "\n\n".join([header, self._lambdas(snap), self._workers(now)])

    def _lambdas(self, snap: stats.Snapshot) -> str:
        priorities = atf_settings.priorities
        names = sorted(set(snap.counts_by_lambda) | set(snap.queue_depths or {}))
        rows = []
        for name in names:
            counts = snap.counts_by_lambda.get(name, {})
            depth = (snap.queue_depths or {}).get(name)
            queued = "/".join(str(depth.get(p, 0)) for p in priorities) if depth else "?"
            rows.append([name, queued,
                         *(sum(counts.get(s.value, 0) for s in statuses)
                           for _heading, statuses in COLUMNS),
                         snap.failures_by_lambda.get(name, 0)])
        totals = ["TOTAL", "", *(sum(snap.counts.get(s.value, 0) for s in statuses)
                                 for _heading, statuses in COLUMNS),
                  sum(snap.failures_by_lambda.values())]
        headers = ["LAMBDA", f"QUEUED ({'/'.join(priorities)})",
                   *(heading for heading, _statuses in COLUMNS), "FAILED RECENTLY"]
        text = cli.table(headers, [*rows, totals])
        if snap.queue_depths is None:
            text += "\n(queue depths unavailable: the queue service does not answer)"
        return text

    def _workers(self, now: Any) -> str:
        workers = liveness.live_workers(now=now)
        rows = [(w.worker_id, w.host, w.pid, w.threads, ", ".join(w.lambdas) or "all",
                 f"{(now - w.last_seen).total_seconds():.0f}s ago")
                for w in workers.order_by("host", "pid")[:50]]
        if not rows:
            return "no live workers"
        return cli.table(["WORKER", "HOST", "PID", "THREADS", "LAMBDAS", "SEEN"], rows)
