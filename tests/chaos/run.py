"""The chaos run: schedule tasks, inject faults on a seeded schedule, settle, check, report."""

from __future__ import annotations

import logging
import random
import threading
import time
from argparse import Namespace
from collections import Counter
from collections.abc import Callable

from tests.chaos import faults, verify
from tests.chaos.faults import Lab
from tests.chaos.load import ApiClient, Loader, Mix
from tests.chaos.services import say

logger = logging.getLogger(__name__)

#: Seconds between two progress lines.
PROGRESS_S = 10.0


class FaultScheduler(threading.Thread):
    """Injects faults in seeded random order, `interval_s` apart on average (0.5x to 1.5x).

    Each round injects every fault once, in a new order; `rounds=None` repeats rounds until
    `keep_going()` says stop (the long mode: while tasks are still being scheduled).
    """

    def __init__(self, lab: Lab, names: list[str], *, interval_s: float, seed: int,
                 rounds: int | None, keep_going: Callable[[], bool]) -> None:
        super().__init__(name="FaultScheduler", daemon=True)
        self.lab, self.names, self.interval_s = lab, names, interval_s
        self.rng = random.Random(seed)
        self.rounds, self.keep_going = rounds, keep_going

    def run(self) -> None:
        done = 0
        while self.rounds is None or done < self.rounds:
            order = list(self.names)
            self.rng.shuffle(order)
            for name in order:
                time.sleep(self.interval_s * self.rng.uniform(0.5, 1.5))
                event = faults.inject(self.lab, name)
                say(f"fault  {event.line()}")
            done += 1
            if self.rounds is None and not self.keep_going():
                return


def settle(timeout_s: float) -> int:
    """Wait until every task is final or `timeout_s` passed; return how many are not."""
    deadline = time.monotonic() + timeout_s
    progress_s = time.monotonic()
    while (left := faults.with_db(verify.unfinished)) and time.monotonic() < deadline:
        if time.monotonic() - progress_s >= PROGRESS_S:
            say(f"settling: {left} task(s) not final yet {verify.status_counts()}")
            progress_s = time.monotonic()
        time.sleep(0.5)
    return left


def run_chaos(args: Namespace, lab: Lab, api: ApiClient | None) -> int:
    """The short and long modes; returns the exit status (1 if a check failed)."""
    started_s = time.monotonic()
    loader = Loader(total=args.tasks, rate=args.rate, batch=args.batch,
                    rng=random.Random(args.seed), victims=lab.victims, api=api,
                    api_share=args.api_share, backlog=verify.unfinished,
                    max_backlog=args.max_backlog,
                    mix=Mix(seconds=args.task_seconds, crash_every=args.crash_every))
    scheduler = FaultScheduler(lab, args.faults, interval_s=args.fault_interval,
                               seed=args.seed + 1, rounds=1 if args.mode == "short" else None,
                               keep_going=loader.is_alive)
    lab.records.start()
    loader.start()
    scheduler.start()
    progress_s = time.monotonic()
    while loader.is_alive() or scheduler.is_alive():
        time.sleep(0.2)
        if time.monotonic() - progress_s >= PROGRESS_S:
            progress_s = time.monotonic()
            say(f"t={progress_s - started_s:5.0f}s scheduled={loader.scheduled} "
                f"records={len(lab.records.executions)} "
                f"{faults.with_db(verify.status_counts)}")
    say(f"scheduled {loader.scheduled} task(s) ({loader.through_api} through the API, "
        f"{loader.api_failures} API batch(es) fell back; held back {loader.throttled_s:.0f}s "
        f"by the backlog) and injected {len(lab.events)} fault(s) in "
        f"{time.monotonic() - started_s:.0f}s; settling")
    settle(args.settle_timeout)
    time.sleep(1.0)  # the last records reach Redis after their task's result
    lab.records.stop()
    report = faults.with_db(lambda: verify.check(
        lab.records.executions, lab.events, lab.victims.dropped, scheduled=loader.scheduled,
        promotions=lab.database.promotions))
    injected = Counter(event.name for event in lab.events)
    say("faults injected: " + ", ".join(f"{name} x{n}" for name, n in sorted(injected.items())))
    for event in lab.events:
        if event.crossed or not event.ok:
            say(f"fault  {event.line()}")
    say(f"process exits seen by the watcher: {dict(lab.cluster.exits)}")
    for line in report.lines():
        say(line)
    say(f"elapsed={time.monotonic() - started_s:.0f}s mode={args.mode} seed={args.seed}")
    say(report.summary())
    return 1 if report.failed else 0
