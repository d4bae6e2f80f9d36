"""Batch writers: several executors hand them writes; each batch is one transaction.

A batch is everything that arrived while the previous one was being written, so a busy worker
writes many tasks per commit and an idle one still writes at once. A submitter hands over a
run of writes (an executor's run of tasks) with one future for them all, and waits on it, so
nothing it hands over is lost before it is durable; a run is never split between batches.

A claim can carry what is waiting (`carry`): the controller records it in its claim's commit
and settles the futures itself. The writer leaves what arrives to the controllers while a claim
is sure to come at once: a controller's claim in flight carries writes (it takes what waits
with its next claim as soon as this one returns), or a controller waits for a free executor
and one is free (an executor whose write arrives has just freed itself, so the claim of its
next task is starting). Otherwise (the controllers wait for work, or for executors that are
all busy) the writer writes what is waiting at once, as it always did.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Generic, TypeVar

from tasks_core.conf import atf_settings
from tasks_core.heartbeat_rule import MAX_FAILED_HEARTBEATS
from workers.transport import TransportUnavailable

logger = logging.getLogger(__name__)

Item = TypeVar("Item")
Out = TypeVar("Out")
#: A run of writes handed over together, and the future of their outcomes (in their order).
Entry = tuple[list[Item], Future[list[Out]]]

#: Writes in one transaction at the most.
MAX_BATCH = 200
#: Seconds between two attempts at a batch ATF did not take (growing to the most).
RETRY_FIRST_S = 0.2
RETRY_MOST_S = 1.0
#: Seconds between two looks at a write left to a controller that waits for a free executor
#: (it takes the write with its claim within microseconds; this only bounds a missed wake-up).
IDLE_LOOK_S = 0.01
#: Seconds a parked run of writes (its shard could not be reached) waits before it is tried
#: again.
PARK_S = 1.0


def retry_budget_s() -> float:
    """How long a batch is retried while ATF cannot be reached: as long as the heartbeat
    budget, after which the process ends anyway. A restarting API or a database failover
    shorter than that costs no write (a start or a result given up would run its task again)."""
    return MAX_FAILED_HEARTBEATS * atf_settings.heartbeat_interval_s


class BatchWriterThread(threading.Thread, Generic[Item, Out]):
    def __init__(self, *, name: str, write: Callable[[list[Item]], Sequence[Out]],
                 reset: Callable[[], None], free_slots: Callable[[], int] = lambda: 0) -> None:
        super().__init__(name=name, daemon=True)
        self.write = write
        self.reset = reset  #: drops this thread's connection after a failed write
        self.free_slots = free_slots  #: executors free for a claim (WorkBuffer.free_slots)
        self._changed = threading.Condition()
        self._pending: deque[Entry[Item, Out]] = deque()
        #: runs whose shard could not be reached, each with when it is tried again (monotonic)
        self._parked: deque[tuple[float, Entry[Item, Out]]] = deque()
        self._carriers: set[object] = set()  #: controllers whose claim in flight carries writes
        self._idle: set[object] = set()  #: controllers waiting for a free executor
        self._stopping = False

    def submit(self, items: Sequence[Item]) -> Future[list[Out]]:
        """Queue a run of writes (at most MAX_BATCH); the future holds their outcomes, in
        their order, once the batch is committed."""
        future: Future[list[Out]] = Future()
        with self._changed:
            self._pending.append((list(items), future))
            self._changed.notify()
        return future

    def park(self, items: Sequence[Item]) -> Future[list[Out]]:
        """Queue a run of writes whose shard could not be reached, to be tried again PARK_S
        from now, while the other writes go on; once stopped, its future fails at once."""
        future: Future[list[Out]] = Future()
        with self._changed:
            if self._stopping:
                future.set_exception(TransportUnavailable("the worker stopped before the "
                                                          "shard of these results was back"))
                return future
            self._parked.append((time.monotonic() + PARK_S, (list(items), future)))
            self._changed.notify()
        return future

    # --- claims that carry writes (the controllers' side) ------------------------------------

    def carry(self, carrier: object) -> list[Entry[Item, Out]]:
        """What is waiting, for `carrier`'s claim to record in its commit; it then settles
        each future (`settle`), or gives the batch back (`give_back`). While it carries a
        batch, what arrives waits for its next claim; with nothing to carry, it carries no
        more, and the writer writes what arrives."""
        with self._changed:
            batch = self._take()
            self._drop(carrier)
            if batch and not self._stopping:
                self._carriers.add(carrier)
            return batch

    def await_slot(self, carrier: object) -> None:
        """`carrier` waits for a free executor: it claims as soon as one is free, so a write
        that arrives while one is free (its executor has just freed itself) waits for it."""
        with self._changed:
            self._drop(carrier)
            self._idle.add(carrier)

    def drop_carrier(self, carrier: object) -> None:
        """`carrier` will claim nothing soon (a failure, a stop): the writer writes what is
        waiting."""
        with self._changed:
            self._drop(carrier)

    def give_back(self, carrier: object, batch: list[Entry[Item, Out]]) -> None:
        """A carried batch whose claim failed: the writer writes it (first), as it would have."""
        with self._changed:
            self._pending.extendleft(reversed(batch))
            self._drop(carrier)
            self._changed.notify()

    @staticmethod
    def items(batch: list[Entry[Item, Out]]) -> list[Item]:
        """The writes of a batch, in order."""
        return [item for items, _future in batch for item in items]

    @staticmethod
    def settle(batch: list[Entry[Item, Out]], outcomes: Sequence[Out]) -> None:
        """Hand each run of a committed batch its outcomes."""
        if len(outcomes) != sum(len(items) for items, _future in batch):
            raise ValueError(f"{len(outcomes)} outcome(s) for a batch of another size")
        start = 0
        for items, future in batch:
            future.set_result(list(outcomes[start:start + len(items)]))
            start += len(items)

    def _drop(self, carrier: object) -> None:
        if carrier in self._carriers or carrier in self._idle:
            self._carriers.discard(carrier)
            self._idle.discard(carrier)
            self._changed.notify()

    def _claim_coming(self) -> bool:
        """Whether a claim that takes what is waiting is sure to start at once."""
        return bool(self._carriers) or (bool(self._idle) and self.free_slots() > 0)

    def _take(self) -> list[Entry[Item, Out]]:
        """Whole runs, up to MAX_BATCH writes (a first run is taken whatever its size)."""
        batch: list[Entry[Item, Out]] = []
        count = 0
        while self._pending and (not batch or count + len(self._pending[0][0]) <= MAX_BATCH):
            entry = self._pending.popleft()
            batch.append(entry)
            count += len(entry[0])
        return batch

    # --- the writer's own writes -------------------------------------------------------------

    def run(self) -> None:
        try:
            while (batch := self._next_batch()) is not None:
                self._write(batch)
        finally:
            self.reset()  # a thread that ends lets go of its connection

    def _next_batch(self) -> list[Entry[Item, Out]] | None:
        """The waiting writes that no claim in flight will carry (blocking until there are
        some); None once stopped and drained."""
        with self._changed:
            while True:
                parked_s = self._unpark()
                if self._stopping or (self._pending and not self._claim_coming()):
                    break
                # A free executor is not announced here: look again shortly while one is.
                timeout_s = IDLE_LOOK_S if self._pending and not self._carriers else None
                if parked_s is not None:
                    timeout_s = parked_s if timeout_s is None else min(timeout_s, parked_s)
                self._changed.wait(timeout=timeout_s)
            if not self._pending:
                return None
            return self._take()

    def _unpark(self) -> float | None:
        """Parked runs whose time has come (all of them once stopping) go to the back of the
        pending writes; the seconds until the next one's time, None when none is parked."""
        now_s = time.monotonic()
        while self._parked and (self._stopping or self._parked[0][0] <= now_s):
            self._pending.append(self._parked.popleft()[1])
        return self._parked[0][0] - now_s if self._parked else None

    def _write(self, batch: list[Entry[Item, Out]]) -> None:
        items = self.items(batch)
        deadline_s = time.monotonic() + retry_budget_s()
        delay_s = RETRY_FIRST_S
        for attempt in itertools.count(1):
            try:
                outcomes = self.write(items)
                break
            except TransportUnavailable as exc:
                logger.warning("%s: writing %d item(s) failed (attempt %d): %s", self.name,
                               len(items), attempt, exc)
                self.reset()
                if time.monotonic() + delay_s > deadline_s:
                    for _items, future in batch:
                        future.set_exception(exc)
                    return
                time.sleep(delay_s)
                delay_s = min(delay_s * 2, RETRY_MOST_S)
            except Exception as exc:  # noqa: BLE001 - handed to every submitter, who logs it
                self.reset()
                for _items, future in batch:
                    future.set_exception(exc)
                return
        self.settle(batch, outcomes)

    def stop(self) -> None:
        """Write what is pending (carried or not), then end."""
        with self._changed:
            self._stopping = True
            self._carriers.clear()
            self._idle.clear()
            self._changed.notify_all()
