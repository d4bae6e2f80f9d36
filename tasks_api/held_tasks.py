"""A remote worker's bound on the tasks it holds: `ATF_API_HELD_TASKS_PER_THREAD` per executor
thread it registered, its claimed and processing tasks together, and at most
`ATF_API_HELD_TASKS_PER_TOKEN` for every worker of its token together.

A `runworker --api` holds two a thread at the most: its controllers claim only for free
executors (workers/buffer.py), and an executor takes its next task only once the result of its
last one is durable, so a thread's task and its last one, whose result is being written, are
all it holds. A worker that claims and never runs what it claimed (a bug, or a team flooding the
service) would otherwise take its lambdas' tasks as fast as the queues fill, a write each, and
hand them back only at the claim timeout, while the API's processor time and the consumer's
re-enqueues go to it. A worker declares its own threads (at most `ATF_API_MAX_WORKER_THREADS`)
and one token may register any number of workers: the token's ceiling is what an operator
allows one token's fleet. A claim gets what the bounds leave; when that is nothing and the claim
carries no results (results are always recorded), the answer is `429` naming the setting with
`Retry-After`.

What a worker and its token hold is the store's count, every server process together, read and
claimed within one transaction that holds a lock on the token (`remote_workers.token_turn`):
simultaneous claims of a token's workers take turns, each counting what the others claimed. A
claim that waits for a task counts again, under the lock, once its wait ends, and puts back what the
bounds no longer leave it. The claims of one worker that wait in this process count what they
ask for while they wait, so its long polls cannot each pop the room that is left. Direct
workers have no bound: they hold the store's credentials and run the project's own code, as the
consumer does, and claim through the same buffer; it is the worker tokens the API has to hold to
a share.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from rest_framework.exceptions import Throttled

from tasks_core import remote_workers
from tasks_core.conf import atf_settings
from tasks_core.models import Worker

logger = logging.getLogger(__name__)

SETTING = "ATF_API_HELD_TASKS_PER_THREAD"
TOKEN_SETTING = "ATF_API_HELD_TASKS_PER_TOKEN"
#: Seconds a worker at its bound is told to wait (Retry-After): its executors' next results.
RETRY_AFTER_S = 1


class HeldTasksExceeded(Throttled):
    """429: the worker, or its token's workers together, hold as many claimed and processing
    tasks as their bound allows."""

    default_code = "held_tasks_exceeded"

    def __init__(self, row: Worker, setting: str = SETTING) -> None:
        if setting == TOKEN_SETTING:
            detail = (f"The workers of this token hold as many claimed or running tasks as they "
                      f"may: {TOKEN_SETTING} allows {ceiling()} for all of them together. "
                      f"Finish or release some first.")
        else:
            detail = (f"Worker {row.worker_id!r} holds as many claimed or running tasks as it "
                      f"may: {SETTING} allows {atf_settings.api_held_tasks_per_thread} per "
                      f"thread it registered ({bound(row)} for its {row.threads}). Finish or "
                      f"release some first.")
        super().__init__(wait=RETRY_AFTER_S, detail=detail)
        self.setting = setting


def bound(row: Worker) -> int:
    """Tasks `row` may hold at once; 0: no bound."""
    return atf_settings.api_held_tasks_per_thread * row.threads


def ceiling() -> int:
    """Tasks the workers of one token may hold at once, together; 0: no ceiling."""
    return atf_settings.api_held_tasks_per_token


@dataclass(frozen=True)
class Room:
    """What a claim may take (`count`), what its worker holds, and which setting leaves it no
    more (None: it got all it asked for)."""

    count: int
    held: int
    setting: str | None = None


class _WaitingAsks:
    """Tasks the waiting claims of each worker ask for, in this server process."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.asked: Counter[str] = Counter()


_waiting = _WaitingAsks()


def _room(row: Worker, wanted: int, held: remote_workers.Holding) -> Room:
    """Of `wanted`, what `row`'s bound and its token's ceiling leave once `held` and the
    worker's waiting claims' asks are counted (the caller holds `_waiting.lock`)."""
    room = Room(count=wanted, held=held.worker)
    if most := bound(row):
        left = max(0, most - held.worker - _waiting.asked[row.worker_id])
        if left < room.count:
            room = Room(count=left, held=held.worker, setting=SETTING)
    if most := ceiling():
        left = max(0, most - held.token)
        if left < room.count:
            room = Room(count=left, held=held.worker, setting=TOKEN_SETTING)
    return room


def room_left(row: Worker, wanted: int, held: remote_workers.Holding) -> Room:
    """Of `wanted`, what `row`'s bounds leave a claim, given what is `held` and what the
    worker's waiting claims in this process ask for."""
    with _waiting.lock:
        return _room(row, wanted, held)


@contextmanager
def counted(row: Worker, wanted: int, reported_ends: Sequence[remote_workers.ReportedEnd] = (),
            *, refuse: bool = True, unreached: set[int] | None = None) -> Iterator[Room]:
    """A transaction in which a claim of `row` may take `Room.count` of `wanted` tasks, its
    worker's and its token's held tasks counted (once `reported_ends` are recorded) under the
    token's lock, held until the claim commits. HeldTasksExceeded when none and `refuse`.
    Without a bound or a ceiling, no count and no transaction. With `unreached`, a shard that
    cannot be reached is not counted (remote_workers.held)."""
    if not bound(row) and not ceiling():
        yield Room(count=wanted, held=0)
        return
    with remote_workers.token_turn(row.credential):
        room = room_left(row, wanted, remote_workers.held(
            row, reported_ends, whole_token=bool(ceiling()), worker_most=bound(row) or None,
            token_most=ceiling() or None, unreached=unreached))
        if not room.count and refuse:
            _refused(row, room.setting or SETTING)
        yield room


@contextmanager
def waiting(row: Worker, wanted: int, *, held: int) -> Iterator[int]:
    """A claim of `row` waits for up to `wanted` tasks: how many its bound leaves it, counted
    for the worker's other claims until it ends; HeldTasksExceeded when none. (Its token's
    ceiling is counted once the wait ends, in `counted`.)"""
    holding = remote_workers.Holding(worker=held, token=0)
    with _waiting.lock:
        if room := _room(row, wanted, holding).count:
            _waiting.asked[row.worker_id] += room
    if not room:
        _refused(row, SETTING)
    try:
        yield room
    finally:
        with _waiting.lock:
            _waiting.asked[row.worker_id] -= room
            if _waiting.asked[row.worker_id] <= 0:
                del _waiting.asked[row.worker_id]


def _refused(row: Worker, setting: str) -> None:
    logger.info("refused: a claim of worker %s, at its bound", row.worker_id,
                extra={"action": "held_tasks_exceeded", "setting": setting})
    raise HeldTasksExceeded(row, setting)
