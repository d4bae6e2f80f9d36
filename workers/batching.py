"""Batch writers: several executors hand them writes; each batch is one transaction.

A batch is everything that arrived while the previous one was being written, so a busy worker
writes many tasks per commit and an idle one still writes at once. Each submitter waits on its
own future, so nothing it hands over is lost before it is durable.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Generic, TypeVar

from tasks_core.conf import atf_settings
from tasks_core.heartbeat_rule import MAX_FAILED_HEARTBEATS
from workers.transport import TransportUnavailable

logger = logging.getLogger(__name__)

Item = TypeVar("Item")
Out = TypeVar("Out")

#: Writes in one transaction at the most.
MAX_BATCH = 200
#: Seconds between two attempts at a batch ATF did not take (growing to the most).
RETRY_FIRST_S = 0.2
RETRY_MOST_S = 1.0


def retry_budget_s() -> float:
    """How long a batch is retried while ATF cannot be reached: as long as the heartbeat
    budget, after which the process ends anyway. A restarting API or a database failover
    shorter than that costs no write (a start or a result given up would run its task again)."""
    return MAX_FAILED_HEARTBEATS * atf_settings.heartbeat_interval_s


class BatchWriterThread(threading.Thread, Generic[Item, Out]):
    def __init__(self, *, name: str, write: Callable[[list[Item]], Sequence[Out]],
                 reset: Callable[[], None]) -> None:
        super().__init__(name=name, daemon=True)
        self.write = write
        self.reset = reset  #: drops this thread's connection after a failed write
        self._pending: queue.Queue[tuple[Item, Future[Out]] | None] = queue.Queue()

    def submit(self, item: Item) -> Future[Out]:
        """Queue a write; the future holds its outcome once the batch is committed."""
        future: Future[Out] = Future()
        self._pending.put((item, future))
        return future

    def run(self) -> None:
        try:
            while (batch := self._next_batch()) is not None:
                if batch:
                    self._write(batch)
        finally:
            self.reset()  # a thread that ends lets go of its connection

    def _next_batch(self) -> list[tuple[Item, Future[Out]]] | None:
        """The waiting writes (blocking for the first); None once stopped and drained."""
        first = self._pending.get()
        if first is None:
            return None
        batch = [first]
        while len(batch) < MAX_BATCH:
            try:
                item = self._pending.get_nowait()
            except queue.Empty:
                break
            if item is None:
                self._pending.put(None)  # stop after this batch
                break
            batch.append(item)
        return batch

    def _write(self, batch: list[tuple[Item, Future[Out]]]) -> None:
        items = [item for item, _future in batch]
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
                    for _item, future in batch:
                        future.set_exception(exc)
                    return
                time.sleep(delay_s)
                delay_s = min(delay_s * 2, RETRY_MOST_S)
            except Exception as exc:  # noqa: BLE001 - handed to every submitter, who logs it
                self.reset()
                for _item, future in batch:
                    future.set_exception(exc)
                return
        for (_item, future), outcome in zip(batch, outcomes, strict=True):
            future.set_result(outcome)

    def stop(self) -> None:
        """Write what is pending, then end."""
        self._pending.put(None)
