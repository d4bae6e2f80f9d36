"""The soak mode: a steady stream of tasks for `--duration`, watched every 10 seconds.

Each window prints throughput (tasks finished per second), delivery-latency percentiles of
the demo.record tasks finished in it (first attempts only: start minus run_at), the backlog and
the resident memory of each role's processes and of Redis. At the end:

- the first WARMUP_SHARE of the windows (at least WARMUP_S seconds) is left out;
- the rest is cut in thirds; memory fails if a role's median RSS in the last third exceeds
  MEMORY_GROWTH x its median in the first third plus MEMORY_SLACK_MB;
- latency fails if the p90 of the last third exceeds LATENCY_GROWTH x the first third's p90
  plus LATENCY_SLACK_S;
- every task must have finished (lost=0) once the stream stops.

A run with fewer than 6 windows after the warm-up is too short to judge drift; it then only
checks lost=0 and says so.
"""

from __future__ import annotations

import random
import statistics
import time
from argparse import Namespace
from dataclasses import dataclass, field
from datetime import datetime

from django.utils import timezone

from tasks_core import shards
from tasks_core.models import TaskEntity
from tests.chaos import faults, verify
from tests.chaos.faults import Lab
from tests.chaos.load import ApiClient, Loader, Mix
from tests.chaos.run import FaultScheduler, settle
from tests.chaos.services import say

WINDOW_S = 10.0
WARMUP_S = 30.0
WARMUP_SHARE = 0.2
MEMORY_GROWTH = 1.25
MEMORY_SLACK_MB = 16.0
LATENCY_GROWTH = 2.0
LATENCY_SLACK_S = 0.25
MIN_JUDGED_WINDOWS = 6
MB = 1024 * 1024


@dataclass(kw_only=True)
class Window:
    ended_s: float  #: seconds since the start
    finished: int
    latencies: list[float]
    backlog: int
    rss: dict[str, int] = field(default_factory=dict)  #: role -> bytes ("redis" included)

    def line(self) -> str:
        stats = verify.percentiles(self.latencies)
        memory = " ".join(f"{role}={size / MB:.0f}" for role, size in sorted(self.rss.items()))
        return (f"t={self.ended_s:5.0f}s done/s={self.finished / WINDOW_S:6.1f} "
                f"{verify.format_ms({k: stats[k] for k in ('p50', 'p90', 'p99')})} "
                f"backlog={self.backlog} rss MB: {memory}")


@shards.across(lambda answers: (sum(count for count, _pairs in answers),
                                [pair for _count, pairs in answers for pair in pairs]))
def _finished_since(since: datetime) -> tuple[int, list[tuple[datetime, datetime]]]:
    """Tasks that succeeded since `since` (every shard's), and the due and start times of the
    demo.record ones that took one attempt."""
    finished = TaskEntity.objects.filter(finished_at__gte=since, status="success")
    pairs = finished.filter(lambda_ref__name="demo.record", attempts=1).values_list("run_at",
                                                                                   "started_at")
    return finished.count(), list(pairs)


def _window(lab: Lab, since: datetime, ended_s: float) -> Window:
    count, pairs = _finished_since(since)
    rss = lab.cluster.rss_by_role()
    rss["redis"] = lab.redis.used_memory()
    return Window(ended_s=ended_s, finished=count,
                  latencies=[max(0.0, (start - run).total_seconds()) for run, start in pairs],
                  backlog=verify.unfinished(), rss=rss)


def judge(windows: list[Window], duration_s: float) -> list[str]:
    """The soak criteria (module docstring); the list of failures, empty when it passed."""
    warmup_s = max(WARMUP_S, WARMUP_SHARE * duration_s)
    judged = [window for window in windows if window.ended_s > warmup_s]
    if len(judged) < MIN_JUDGED_WINDOWS:
        say(f"soak: only {len(judged)} window(s) after the warm-up: too short to judge drift")
        return []
    third = len(judged) // 3
    first, last = judged[:third], judged[-third:]
    failures = []
    for role in sorted(first[0].rss):
        early = statistics.median(window.rss.get(role, 0) for window in first)
        late = statistics.median(window.rss.get(role, 0) for window in last)
        limit = MEMORY_GROWTH * early + MEMORY_SLACK_MB * MB
        say(f"memory {role}: {early / MB:.0f} MB -> {late / MB:.0f} MB (limit {limit / MB:.0f})")
        if late > limit:
            failures.append(f"memory of {role} grew from {early / MB:.0f} MB to "
                            f"{late / MB:.0f} MB")
    early_p90 = verify.percentiles([x for w in first for x in w.latencies])["p90"]
    late_p90 = verify.percentiles([x for w in last for x in w.latencies])["p90"]
    limit_s = LATENCY_GROWTH * early_p90 + LATENCY_SLACK_S
    say(f"latency p90: {early_p90 * 1000:.0f} ms -> {late_p90 * 1000:.0f} ms "
        f"(limit {limit_s * 1000:.0f})")
    if late_p90 > limit_s:
        failures.append(f"p90 latency drifted from {early_p90 * 1000:.0f} ms to "
                        f"{late_p90 * 1000:.0f} ms")
    return failures


def run_soak(args: Namespace, lab: Lab, api: ApiClient | None) -> int:
    """Steady load for args.duration seconds; returns the exit status."""
    loader = Loader(total=int(args.rate * args.duration), rate=args.rate, batch=args.batch,
                    rng=random.Random(args.seed), victims=lab.victims, api=api,
                    api_share=args.api_share, backlog=verify.unfinished,
                    max_backlog=args.max_backlog,
                    mix=Mix(seconds=args.task_seconds, crash_every=10**12))
    if args.fault_interval > 0:
        FaultScheduler(lab, args.faults, interval_s=args.fault_interval, seed=args.seed + 1,
                       rounds=None, keep_going=loader.is_alive).start()
    started_s = time.monotonic()
    loader.start()
    windows: list[Window] = []
    while loader.is_alive():
        since = timezone.now()
        time.sleep(WINDOW_S)
        window = faults.with_db(
            lambda since=since: _window(lab, since, time.monotonic() - started_s))
        windows.append(window)
        say(window.line())
    left = settle(args.settle_timeout)
    failures = judge(windows, args.duration)
    if left:
        failures.append(f"{left} task(s) not final after the stream stopped")
    total = sum(window.finished for window in windows)
    verdict = "FAILED: " + "; ".join(failures) if failures else "ok"
    say(f"soak {verdict} lost={left} tasks={loader.scheduled} windows={len(windows)} "
        f"mean_done_per_s={total / max(1.0, time.monotonic() - started_s):.1f}")
    return 1 if failures else 0
