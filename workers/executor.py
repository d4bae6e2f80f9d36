"""Executor threads: run claimed tasks' lambdas and hand their outcomes to the result writer.

No queue I/O here."""

from __future__ import annotations

import json
import logging
import threading
import time

from django.utils import timezone

from tasks_core import registry, store
from tasks_core.context import Fatal, Retry, TaskContext
from workers import db
from workers.buffer import WorkBuffer
from workers.heartbeat import HeartbeatThread
from workers.results import ResultWriterThread

logger = logging.getLogger(__name__)

Outcome = store.Outcome


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


class ExecutorThread(threading.Thread):
    def __init__(self, *, index: int, buffer: WorkBuffer, heartbeat: HeartbeatThread,
                 worker_id: str, writer: ResultWriterThread) -> None:
        super().__init__(name=f"ExecutorThread-{index}", daemon=True)
        self.buffer = buffer
        self.heartbeat = heartbeat
        self.worker_id = worker_id
        self.writer = writer

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
            # Out of the heartbeat's set before the result is written, so a heartbeat racing
            # the write does not mistake the finished task for a lost one.
            if self.buffer.finishing(task):
                logger.error("task %d finished after losing its lease; result discarded",
                             task.task_id, extra={"action": "result_discarded"})
                return
            # Wait until the result is durable before taking another task: a process that
            # dies later then loses only the tasks it was running, never finished ones.
            self.writer.submit(task, result).wait()
        finally:
            self.buffer.end(task)
