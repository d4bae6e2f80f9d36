"""The result writer: records finished attempts in batches, one transaction for every result
that arrived while the previous batch was being written, instead of one per task."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import Sequence

from django.db import DatabaseError
from django.utils import timezone

from tasks_core import store
from tasks_core.states import TaskStatus
from workers import db

logger = logging.getLogger(__name__)

#: Results written in one transaction at the most.
MAX_BATCH = 200
#: Attempts at writing a batch when the database fails; after that the tasks run again
#: once their heartbeat timeout passes (at least once, never lost).
WRITE_ATTEMPTS = 5

Done = tuple[store.ClaimedTask, store.Result]
Pending = tuple[store.ClaimedTask, store.Result, threading.Event]


class Tally:
    """Outcomes counted across a process, for the periodic summary line."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def add(self, outcome: str) -> None:
        with self._lock:
            self._counts[outcome] += 1

    def take(self) -> Counter[str]:
        with self._lock:
            counts, self._counts = self._counts, Counter()
            return counts


class ResultWriterThread(threading.Thread):
    def __init__(self, *, tally: Tally) -> None:
        super().__init__(name="ResultWriterThread", daemon=True)
        self.tally = tally
        self._pending: queue.Queue[Pending | None] = queue.Queue()

    def submit(self, task: store.ClaimedTask, result: store.Result) -> threading.Event:
        """Queue a result; the event is set once it is written (or given up on)."""
        written = threading.Event()
        self._pending.put((task, result, written))
        return written

    def run(self) -> None:
        try:
            self._run()
        finally:
            db.reset_connection()  # a thread that ends lets go of its connection

    def _run(self) -> None:
        while True:
            first = self._pending.get()
            if first is None:
                return
            batch = [first]
            stopping = False
            while len(batch) < MAX_BATCH:
                try:
                    item = self._pending.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stopping = True
                    break
                batch.append(item)
            self.write(batch)
            if stopping:
                return

    def write(self, batch: Sequence[Pending]) -> None:
        try:
            self._write([(task, result) for task, result, _written in batch])
        finally:
            for _task, _result, written in batch:
                written.set()

    def _write(self, batch: Sequence[Done]) -> None:
        for attempt in range(1, WRITE_ATTEMPTS + 1):
            try:
                statuses = store.finish_many(batch, now=timezone.now())
                break
            except DatabaseError as exc:
                logger.warning("recording %d result(s) failed (attempt %d): %s", len(batch),
                               attempt, exc)
                db.reset_connection()
                time.sleep(0.2 * attempt)
            except Exception:
                logger.exception("recording %d result(s) failed", len(batch))
                db.reset_connection()
                return
        else:
            logger.error("gave up recording %d result(s); those tasks will run again",
                         len(batch))
            return
        for (task, result), status in zip(batch, statuses, strict=True):
            self._log(task, result, status)

    def stop(self) -> None:
        """Write what is pending, then end."""
        self._pending.put(None)

    def _log(self, task: store.ClaimedTask, result: store.Result,
             status: TaskStatus | None) -> None:
        self.tally.add(str(status or "stale"))
        extra = {"action": f"task_{status or 'stale'}", "task_id": task.task_id}
        error = result.error or {}
        if status is None:
            logger.warning("task %d: result refused, its lease moved on", task.task_id,
                           extra=extra)
        elif status in (TaskStatus.DEAD, TaskStatus.FATAL_FAILURE):
            logger.error("task %d (%s) ended %s after attempt %d: %s: %s\n%s", task.task_id,
                         task.lambda_name, status, task.attempt, error.get("type"),
                         error.get("message"), error.get("traceback", ""), extra=extra)
        elif status is TaskStatus.RETRYING:
            logger.warning("task %d (%s) attempt %d failed, will retry: %s: %s", task.task_id,
                           task.lambda_name, task.attempt, error.get("type"),
                           error.get("message"), extra=extra)
        else:
            logger.debug("task %d (%s) succeeded", task.task_id, task.lambda_name, extra=extra)
