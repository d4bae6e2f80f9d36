"""Executor threads: run claimed tasks' lambdas and hand their outcomes to the result writer.

No queue I/O here."""

from __future__ import annotations

import json
import logging
import threading
import time

from django.utils import timezone

from tasks_core import registry, store
from tasks_core.context import (
    AttemptStopped,
    Fatal,
    Retry,
    TaskCancelled,
    TaskContext,
    TimeLimitExceeded,
)
from tasks_core.states import TaskStatus
from workers import db
from workers.batching import BatchWriterThread
from workers.buffer import WorkBuffer
from workers.heartbeat import HeartbeatThread
from workers.results import Tally, log_outcome
from workers.transport import FinishedAttempt, Transport

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
    except TimeLimitExceeded as exc:
        return failed(Outcome.TIMEOUT, exc)
    except TaskCancelled as exc:
        return failed(Outcome.CANCELLED, exc)
    except BaseException as exc:  # noqa: BLE001 - SystemExit, KeyboardInterrupt... included:
        # whatever a lambda raises fails its attempt (retriable), never its executor thread
        return failed(Outcome.RETRY, exc)
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        error = {"type": "ResultNotJSON", "traceback": "",
                 "message": f"the lambda returned a value that is not JSON: {exc}"}
        return store.Result(outcome=Outcome.FATAL, error=error, started_at=started, worker=worker)
    return store.Result(outcome=Outcome.SUCCESS, value=value, started_at=started, worker=worker)


def start_writer(transport: Transport) -> BatchWriterThread[store.ClaimedTask, bool]:
    """The thread that starts claimed tasks in batches (claimed -> processing)."""
    return BatchWriterThread(name="StartWriterThread", write=transport.start_many,
                             reset=transport.reset)


def result_writer(transport: Transport) -> BatchWriterThread[FinishedAttempt, TaskStatus | None]:
    """The thread that records finished attempts in batches."""
    return BatchWriterThread(name="ResultWriterThread", write=transport.finish_many,
                             reset=transport.reset)


class ExecutorThread(threading.Thread):
    def __init__(self, *, index: int, buffer: WorkBuffer, heartbeat: HeartbeatThread,
                 worker_id: str, starts: BatchWriterThread[store.ClaimedTask, bool],
                 results: BatchWriterThread[FinishedAttempt, TaskStatus | None],
                 tally: Tally) -> None:
        super().__init__(name=f"ExecutorThread-{index}", daemon=True)
        self.buffer = buffer
        self.heartbeat = heartbeat
        self.worker_id = worker_id
        self.starts = starts
        self.results = results
        self.tally = tally

    def run(self) -> None:
        """Run tasks until the worker closes the buffer; nothing else ends the thread."""
        while True:
            task = self.buffer.take(timeout_s=0.5)
            if task is None:
                if self.buffer.closed:
                    return
                continue
            try:
                self.execute(task)
            except BaseException:  # noqa: BLE001 - the executor outlives anything
                logger.exception("executor failed around task %d", task.task_id,
                                 extra={"action": "executor_restart", "task_id": task.task_id})
                db.reset_connection()

    def execute(self, task: store.ClaimedTask) -> None:
        """Start the task, run its lambda, record the outcome unless the lease was lost."""
        # Starts and results go through batch writers: executors that finish at about the
        # same time share one transaction, and each waits until its own write is durable.
        try:
            if not self.starts.submit(task).result():
                logger.debug("task %d moved on before it started; skipped", task.task_id)
                return
            result = self.attempt(task)
            if result is None:
                return
            # Wait until the result is durable before taking another task: a process that
            # dies later then loses only the tasks it was running, never finished ones.
            status = self.results.submit((task, result)).result()
        finally:
            self.buffer.end(task)
        log_outcome(task, result, status, self.tally)

    def attempt(self, task: store.ClaimedTask) -> store.Result | None:
        """Run the lambda of a started task; its outcome, or None when that must not be
        recorded (the lease was lost, or the time limit ended the attempt and recorded it)."""
        ctx = TaskContext(task_id=task.task_id, attempt=task.attempt, collection=task.collection,
                          priority=task.priority, lambda_name=task.lambda_name,
                          _heartbeat=lambda: self.heartbeat.beat_one(task),
                          _cancelled=lambda: self.buffer.cancel_requested(task.task_id))
        result = None
        try:
            self.buffer.begin(task, time.monotonic(), threading.get_ident())
            result = run_lambda(task, ctx, worker=self.worker_id)
        except AttemptStopped:
            pass  # the interrupt came just after the lambda returned: the stop still holds
        while True:
            # Out of the heartbeat's set before the result is written, so a heartbeat racing
            # the write does not mistake the finished task for a lost one.
            try:
                running = self.buffer.finishing(task)
                break
            except AttemptStopped:
                continue  # raised on the way there; finishing() withdraws any later one
        if running.stopped_s is not None:
            logger.info("task %d: its lambda stopped after its time limit or cancel",
                        task.task_id, extra={"action": "timeout_stopped", "task_id": task.task_id})
            return None
        if running.lost:
            logger.error("task %d finished after losing its lease; result discarded",
                         task.task_id, extra={"action": "result_discarded"})
            return None
        return result
