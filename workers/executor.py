"""Executor threads: run started tasks' lambdas and hand their outcomes to the result writer.

An executor works in runs: once a lambda returns it takes the next task waiting in the buffer
at once, and hands the run's results to the writer together when the run ends (nothing left
waiting, RUN_MAX_TASKS tasks, or RUN_MAX_S spent), then waits until they are durable before
it takes another task. A run of short tasks costs one hand-over and one wait, not one each.
No queue I/O here."""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from django.conf import settings
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
from workers import db
from workers.batching import BatchWriterThread
from workers.buffer import WorkBuffer
from workers.heartbeat import HeartbeatThread
from workers.results import Tally, recorded
from workers.transport import FinishedAttempt, Transport, Written

if TYPE_CHECKING:
    from workers.async_executor import AsyncExecutor

logger = logging.getLogger(__name__)

Outcome = store.Outcome

#: A run ends after this many tasks (its results then go to the writer)...
RUN_MAX_TASKS = 50
#: ...or once it has lasted this long (seconds): a run only gathers short tasks, so a result
#: waits at most this long behind its executor's next lambdas.
RUN_MAX_S = 0.02


#: Longest wait of an idle executor for a task: a new task and the buffer's close both wake it,
#: so this only bounds a wake-up missed (64 idle executors polling twice a second cost every
#: process of a fleet a wake-up every 8 ms).
IDLE_WAIT_S = 5.0


def wall_clock() -> Callable[[], datetime]:
    """`timezone.now`, with settings.USE_TZ read once (per run) rather than at every call."""
    return functools.partial(datetime.now, UTC) if settings.USE_TZ else datetime.now


def run_lambda(task: store.ClaimedTask, ctx: TaskContext, *, worker: str,
               started: datetime | None = None) -> store.Result:
    """Call the task's lambda and turn what happened into a Result; `started`: when the
    attempt began (now unless given). An async lambda's coroutine is run to its end here, on
    a loop of its own (workers.testing); a worker runs it on its event loop instead
    (workers.async_executor)."""
    def call() -> Any:
        value = registry.get(task.lambda_name)(ctx, task.payload)
        return asyncio.run(value) if inspect.iscoroutine(value) else value

    return lambda_result(call, started=started or timezone.now(), worker=worker)


def lambda_result(call: Callable[[], Any], *, started: datetime, worker: str) -> store.Result:
    """Turn what `call` (a lambda's run) returned or raised into a Result."""
    def failed(outcome: Outcome, exc: BaseException, delay_s: float | None = None) -> store.Result:
        return store.Result(outcome=outcome, error=store.error_info(exc), delay_s=delay_s,
                            started_at=started, worker=worker)

    try:
        value = call()
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
                  ) -> BatchWriterThread[FinishedAttempt, Written]:
    """The thread that records finished attempts in batches (what the controllers' claims do
    not carry: they claim for `buffer`'s free executors)."""
    return BatchWriterThread(name="ResultWriterThread", write=transport.finish_many,
                             reset=transport.reset,
                             free_slots=buffer.free_slots if buffer else lambda: 0)


class ExecutorThread(threading.Thread):
    def __init__(self, *, index: int, buffer: WorkBuffer, heartbeat: HeartbeatThread,
                 worker_id: str,
                 results: BatchWriterThread[FinishedAttempt, Written],
                 tally: Tally, task_link: TaskLink | None = None,
                 async_lane: AsyncExecutor | None = None) -> None:
        super().__init__(name=f"ExecutorThread-{index}", daemon=True)
        self.buffer = buffer
        self.heartbeat = heartbeat
        self.worker_id = worker_id
        self.results = results
        self.tally = tally
        #: Where its lambdas' parent results, steps and progress go (None: the store).
        self.task_link = task_link
        #: Where the tasks of async lambdas go to run (None: this worker serves none).
        self.async_lane = async_lane
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
            task = self.buffer.take(timeout_s=IDLE_WAIT_S)
            if task is None:
                if self.buffer.closed:
                    return
                continue
            if self.async_lane is not None and self.async_lane.start(task, self.context):
                continue  # an async lambda's task: it runs on the worker's event loop
            try:
                handed = self.run_from(task)
            except BaseException:  # noqa: BLE001 - the executor outlives anything
                logger.exception("executor failed around its run",
                                 extra={"action": "executor_restart"})
                db.reset_connection()
                continue
            if handed is not None:
                self._wait_until_durable(handed)

    @staticmethod
    def _wait_until_durable(handed: Future[list[Written]]) -> None:
        """The run's results are durable before this executor takes another task: a lambda
        that kills its process cannot take its executor's previous results with it, and a
        task waiting meanwhile stays in the buffer, where the heartbeat covers it (taken, it
        would be neither buffered nor running: unheartbeated while a slow write lasted, it
        could be enqueued again and run twice at once). A failed write is logged by
        `_recorded`."""
        handed.exception()  # waits; never raises the write's failure

    def execute(self, task: store.ClaimedTask) -> Future[list[Written]] | None:
        """Run one started task and hand its result to the writer (`run_from`, a run of one)."""
        return self.run_from(task, max_tasks=1)

    def run_from(self, task: store.ClaimedTask, *, max_tasks: int = RUN_MAX_TASKS,
                 ) -> Future[list[Written]] | None:
        """Run `task`, then the tasks waiting in the buffer, one after another, while the run
        is short (`max_tasks`, RUN_MAX_S); hand their results to the writer together and
        return the future of their write (None: nothing to write: every lease lost, every
        attempt stopped). Each task stays in the buffer, heartbeated, until its result is
        durable: a process that dies before then has its task run again after the heartbeat
        timeout, never at the same time. A task whose lease was lost is ended unrecorded."""
        finished: list[FinishedAttempt] = []
        clock = wall_clock()
        ends_s = time.monotonic() + RUN_MAX_S
        for count in range(1, max_tasks + 1):
            try:
                result = self.attempt(task, clock)
            except BaseException:
                self.buffer.end(task)
                logger.exception("executor failed around task %d", task.task_id,
                                 extra={"action": "executor_restart", "task_id": task.task_id})
                db.reset_connection()
                break
            if result is None:
                self.buffer.end(task)
            else:
                finished.append((task, result))
            if count == max_tasks or time.monotonic() >= ends_s:
                break
            if (waiting := self.buffer.take_waiting()) is None:
                break
            if self.async_lane is not None and self.async_lane.start(waiting, self.context):
                break  # an async lambda's task: it runs on the event loop, and the run ends
            task = waiting
        if not finished:
            return None
        # Results go through a batch writer: executors that finish at about the same time
        # share one transaction (or a controller's claim carries them).
        handed = self.results.submit(finished)
        handed.add_done_callback(functools.partial(self._recorded, finished))
        return handed

    def _recorded(self, finished: list[FinishedAttempt],
                  future: Future[list[Written]]) -> None:
        """The result writer's answer about a run's results (in the writer's thread)."""
        recorded(self.buffer, self.tally, finished, future, writer=self.results)

    def context(self, task: store.ClaimedTask) -> TaskContext:
        """The `ctx` of a started task's lambda: its heartbeat and cancel are this worker's."""
        return TaskContext(task_id=task.task_id, attempt=task.attempt, collection=task.collection,
                           priority=task.priority, lambda_name=task.lambda_name,
                           _heartbeat=lambda: self.heartbeat.beat_one(task),
                           _cancelled=lambda: self.buffer.cancel_requested(task.task_id),
                           _lease=task.lease, _link=self.task_link)

    def attempt(self, task: store.ClaimedTask,
                clock: Callable[[], datetime] = timezone.now) -> store.Result | None:
        """Run the lambda of a started task; its outcome, or None when that must not be
        recorded (the lease was lost, or the time limit ended the attempt and recorded it)."""
        ctx = self.context(task)
        result = None
        try:
            running = self.buffer.begin(task, time.monotonic(), threading.get_ident(), clock())
            result = self._run_lambda(task, ctx, worker=self.worker_id,
                                      started=running.started_at)
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
