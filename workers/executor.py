"""Executor threads: run started tasks' lambdas and hand their outcomes to the result writer.

No queue I/O here."""

from __future__ import annotations

import functools
import logging
import threading
import time
from concurrent.futures import Future, wait

from django.utils import timezone

from tasks_core import registry, store, tracing
from tasks_core.context import (
    AttemptStopped,
    Fatal,
    Retry,
    TaskCancelled,
    TaskContext,
    TaskLink,
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
        value_json = store.encode(value)  # the text the store writes: encoded once, here
    except (TypeError, ValueError, RecursionError) as exc:
        error = {"type": "ResultNotJSON", "traceback": "",
                 "message": f"the lambda returned a value that is not JSON: {exc}"}
        return store.Result(outcome=Outcome.FATAL, error=error, started_at=started, worker=worker)
    return store.Result(outcome=Outcome.SUCCESS, value=value, value_json=value_json,
                        started_at=started, worker=worker)


def result_writer(transport: Transport, buffer: WorkBuffer | None = None,
                  ) -> BatchWriterThread[FinishedAttempt, TaskStatus | None]:
    """The thread that records finished attempts in batches (what the controllers' claims do
    not carry: they claim for `buffer`'s free executors)."""
    return BatchWriterThread(name="ResultWriterThread", write=transport.finish_many,
                             reset=transport.reset,
                             free_slots=buffer.free_slots if buffer else lambda: 0)


class ExecutorThread(threading.Thread):
    def __init__(self, *, index: int, buffer: WorkBuffer, heartbeat: HeartbeatThread,
                 worker_id: str,
                 results: BatchWriterThread[FinishedAttempt, TaskStatus | None],
                 tally: Tally, task_link: TaskLink | None = None) -> None:
        super().__init__(name=f"ExecutorThread-{index}", daemon=True)
        self.buffer = buffer
        self.heartbeat = heartbeat
        self.worker_id = worker_id
        self.results = results
        self.tally = tally
        #: Where its lambdas' parent results, steps and progress go (None: the store).
        self.task_link = task_link
        #: This executor's last result handed to the writer (its outcome once durable).
        self._last_result: Future[TaskStatus | None] | None = None
        #: How it runs a lambda: in a span per attempt where tracing is on, decided here once.
        self._run_lambda = tracing.traced(run_lambda) if tracing.ENABLED else run_lambda

    def run(self) -> None:
        """Run tasks until the worker closes the buffer; nothing else ends the thread."""
        try:
            self._run_tasks()
        finally:
            db.reset_connection()  # a thread that ends lets go of its connection

    def _run_tasks(self) -> None:
        while True:
            if self._last_result is not None:
                # The previous result is durable before this executor takes another task: a
                # lambda that kills its process cannot take its executor's previous result with
                # it, and a task waiting meanwhile stays in the buffer, where the heartbeat
                # covers it (taken, it would be neither buffered nor running: unheartbeated
                # while a slow write lasted, it could be enqueued again and run twice at once).
                wait([self._last_result])
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
        """Run the lambda of a started task and hand its outcome to the result writer, unless
        the lease was lost; the executor then takes its next task at once. The task stays
        in the buffer, heartbeated, until its result is durable: a process that dies before
        then has its task run again after the heartbeat timeout, never at the same time."""
        try:
            result = self.attempt(task)
        except BaseException:
            self.buffer.end(task)
            raise
        if result is None:
            self.buffer.end(task)
            return
        # Results go through a batch writer: executors that finish at about the same time
        # share one transaction, and none waits for it.
        self._last_result = self.results.submit((task, result))
        self._last_result.add_done_callback(functools.partial(self._recorded, task, result))

    def _recorded(self, task: store.ClaimedTask, result: store.Result,
                  future: Future[TaskStatus | None]) -> None:
        """The result writer's answer about one result (in the writer's thread)."""
        self.buffer.end(task)
        if (exc := future.exception()) is not None:
            logger.error("task %d: its result could not be recorded (%s); it runs again after "
                         "its heartbeat timeout", task.task_id, exc,
                         extra={"action": "result_unrecorded", "task_id": task.task_id})
            return
        log_outcome(task, result, future.result(), self.tally)

    def attempt(self, task: store.ClaimedTask) -> store.Result | None:
        """Run the lambda of a started task; its outcome, or None when that must not be
        recorded (the lease was lost, or the time limit ended the attempt and recorded it)."""
        ctx = TaskContext(task_id=task.task_id, attempt=task.attempt, collection=task.collection,
                          priority=task.priority, lambda_name=task.lambda_name,
                          _heartbeat=lambda: self.heartbeat.beat_one(task),
                          _cancelled=lambda: self.buffer.cancel_requested(task.task_id),
                          _lease=task.lease, _link=self.task_link)
        result = None
        try:
            self.buffer.begin(task, time.monotonic(), threading.get_ident())
            result = self._run_lambda(task, ctx, worker=self.worker_id)
        except AttemptStopped:
            pass  # the interrupt came just after the lambda returned: the stop still holds
        while True:
            # Marked finishing before the result is written: a heartbeat racing the write
            # then leaves it alone instead of taking it for lost (WorkBuffer.mark_lost).
            try:
                running = self.buffer.finishing(task)
                break
            except AttemptStopped:
                continue  # raised on the way there; finishing() withdraws any later one
        if running.stopped_s is not None:
            # The interrupt may have hit the lambda inside its own queries: its connection may
            # be mid-transaction, so the next attempt on this thread starts on a fresh one.
            db.reset_connection()
            logger.info("task %d: its lambda stopped after its time limit or cancel",
                        task.task_id, extra={"action": "timeout_stopped", "task_id": task.task_id})
            return None
        if running.lost:
            logger.error("task %d finished after losing its lease; result discarded",
                         task.task_id, extra={"action": "result_discarded"})
            return None
        return result
