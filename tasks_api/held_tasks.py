"""A remote worker's bound on the tasks it holds: `ATF_API_HELD_TASKS_PER_THREAD` per executor
thread it registered, its claimed and processing tasks together.

A `runworker --api` holds two a thread at the most: its controllers claim only for free
executors (workers/buffer.py), and an executor takes its next task only once the result of its
last one is durable, so a thread's task and its last one, whose result is being written, are
all it holds. A worker that claims and never runs what it claimed (a bug, or a team flooding the
service) would otherwise take its lambdas' tasks as fast as the queues fill, a write each, and
hand them back only at the claim timeout, while the API's processor time and the consumer's
re-enqueues go to it. A claim gets what the bound leaves; when that is nothing and the claim
carries no results (results are always recorded), the answer is `429` naming the setting with
`Retry-After`.

What a worker holds is the store's count, every server process together, read once per claim.
The claims of one worker that wait for a task in this process count what they ask for while
they wait, so its long polls cannot each take the room that is left. Direct workers have no
bound: they hold the store's credentials and run the project's own code, as the consumer does,
and claim through the same buffer; it is the worker tokens the API has to hold to a share.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from rest_framework.exceptions import Throttled

from tasks_core import remote_workers
from tasks_core.conf import atf_settings
from tasks_core.models import Worker

logger = logging.getLogger(__name__)

SETTING = "ATF_API_HELD_TASKS_PER_THREAD"
#: Seconds a worker at its bound is told to wait (Retry-After): its executors' next results.
RETRY_AFTER_S = 1


class HeldTasksExceeded(Throttled):
    """429: the worker holds as many claimed and processing tasks as its bound allows."""

    default_code = "held_tasks_exceeded"

    def __init__(self, row: Worker) -> None:
        super().__init__(wait=RETRY_AFTER_S, detail=(
            f"Worker {row.worker_id!r} holds as many claimed or running tasks as it may: "
            f"{SETTING} allows {atf_settings.api_held_tasks_per_thread} per thread it "
            f"registered ({bound(row)} for its {row.threads}). Finish or release some first."))
        self.setting = SETTING


def bound(row: Worker) -> int:
    """Tasks `row` may hold at once; 0: no bound."""
    return atf_settings.api_held_tasks_per_thread * row.threads


def holding(row: Worker, reported_ends: Sequence[remote_workers.ReportedEnd] = ()) -> int:
    """Tasks `row` holds once the claim's `reported_ends` are recorded (no read without a
    bound)."""
    return remote_workers.held(row, reported_ends) if bound(row) else 0


class _WaitingAsks:
    """Tasks the waiting claims of each worker ask for, in this server process."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.asked: Counter[str] = Counter()


_waiting = _WaitingAsks()


def _room(row: Worker, wanted: int, held: int) -> int:
    """Of `wanted`, what `row`'s bound leaves once `held` and its waiting claims' asks are
    counted (the caller holds `_waiting.lock`)."""
    if not (most := bound(row)):
        return wanted
    return max(0, min(wanted, most - held - _waiting.asked[row.worker_id]))


def claimable(row: Worker, wanted: int, *, held: int, carries_results: bool) -> int:
    """How many of `wanted` tasks a claim of `row` may take now, `held` being what it holds;
    HeldTasksExceeded when none and the claim carries no results."""
    with _waiting.lock:
        room = _room(row, wanted, held)
    if not room and not carries_results:
        _refused(row)
    return room


@contextmanager
def waiting(row: Worker, wanted: int, *, held: int) -> Iterator[int]:
    """A claim of `row` waits for up to `wanted` tasks: how many the bound leaves it, counted
    for the worker's other claims until it ends; HeldTasksExceeded when none."""
    with _waiting.lock:
        if room := _room(row, wanted, held):
            _waiting.asked[row.worker_id] += room
    if not room:
        _refused(row)
    try:
        yield room
    finally:
        with _waiting.lock:
            _waiting.asked[row.worker_id] -= room
            if _waiting.asked[row.worker_id] <= 0:
                del _waiting.asked[row.worker_id]


def _refused(row: Worker) -> None:
    logger.info("refused: a claim of worker %s, which holds its bound", row.worker_id,
                extra={"action": "held_tasks_exceeded", "setting": SETTING})
    raise HeldTasksExceeded(row)
