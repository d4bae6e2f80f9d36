"""Executor threads: run claimed tasks' lambdas and record their outcomes. No queue I/O here."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from django.db import DatabaseError
from django.utils import timezone

from tasks_core import registry, store
from tasks_core.context import Fatal, Retry, TaskContext
from tasks_core.states import TaskStatus
from workers import db
from workers.buffer import WorkBuffer
from workers.heartbeat import HeartbeatThread

logger = logging.getLogger(__name__)

Outcome = store.Outcome
#: Attempts at recording a result when the database fails; the heartbeat keeps the lease.
RECORD_ATTEMPTS = 5


class Tally:
    """Outcomes counted across a process's executors, for the periodic summary line."""

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


def run_lambda(task: store.ClaimedTask, ctx: TaskContext, *, worker: str) -> store.Result:
    """Call the task's lambda and turn what happened into a Result."""
    started = timezone.now()

    def failed(outcome: Outcome, exc: BaseException, delay_s: float | None = None) -> store.Result:
        return store.Result(outcome=outcome, error=store.error_info(exc), delay_s=delay_s,
                            started_at=started, worker=worker)

    try:
        value = registry.get(task.lambda_name)(ctx, task.payload)
    except Fatal as exc:
        return failed(Outcome.FATAL, exc)
    except Retry as exc:
        return failed(Outcome.RETRY, exc, exc.delay)
    except Exception as exc:  # noqa: BLE001 - any other exception is a retriable failure
        return failed(Outcome.RETRY, exc)
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        error = {"type": "ResultNotJSON", "traceback": "",
                 "message": f"the lambda returned a value that is not JSON: {exc}"}
        return store.Result(outcome=Outcome.FATAL, error=error, started_at=started, worker=worker)
    return store.Result(outcome=Outcome.SUCCESS, value=value, started_at=started, worker=worker)


def _with_retries(write: Callable[[], Any]) -> Any:
    for attempt in range(1, RECORD_ATTEMPTS + 1):
        try:
            return write()
        except DatabaseError as exc:
            logger.warning("recording a result failed (attempt %d): %s", attempt, exc)
            db.reset_connection()
            if attempt == RECORD_ATTEMPTS:
                raise
            time.sleep(0.2 * attempt)
    return None


class ExecutorThread(threading.Thread):
    def __init__(self, *, index: int, buffer: WorkBuffer, heartbeat: HeartbeatThread,
                 worker_id: str, tally: Tally) -> None:
        super().__init__(name=f"ExecutorThread-{index}", daemon=True)
        self.buffer = buffer
        self.heartbeat = heartbeat
        self.worker_id = worker_id
        self.tally = tally

    def run(self) -> None:
        while True:
            task = self.buffer.take(timeout_s=0.5)
            if task is None:
                if self.buffer.closed:
                    return
                continue
            try:
                self.execute(task)
            except Exception:
                logger.exception("executor failed around task %d", task.task_id,
                                 extra={"action": "executor_restart", "task_id": task.task_id})
                db.reset_connection()

    def execute(self, task: store.ClaimedTask) -> None:
        """Start the task, run its lambda, record the outcome unless the lease was lost."""
        if not store.start(task, now=timezone.now()):
            logger.debug("task %d moved on before it started; skipped", task.task_id)
            return
        self.buffer.begin(task, time.monotonic())
        try:
            ctx = TaskContext(task_id=task.task_id, attempt=task.attempt,
                              collection=task.collection, priority=task.priority,
                              lambda_name=task.lambda_name,
                              _heartbeat=lambda: self.heartbeat.beat_one(task))
            result = run_lambda(task, ctx, worker=self.worker_id)
            lost = self.buffer.is_lost(task.task_id)
        finally:
            # Out of the heartbeat's set before the result is written, so a heartbeat racing
            # the write does not mistake the finished task for a lost one.
            self.buffer.end(task)
        if lost:
            logger.error("task %d finished after losing its lease; result discarded",
                         task.task_id, extra={"action": "result_discarded"})
            return
        status = _with_retries(lambda: store.finish(task, result, now=timezone.now()))
        self._log(task, result, status)

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
