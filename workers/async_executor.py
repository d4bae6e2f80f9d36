"""The event loop of a worker process's async lambdas: many attempts in flight on one thread.

An executor thread that takes a task of an `async def` lambda hands it here (`start`) and goes
back to the buffer at once; the lambda's coroutine runs on the process's one event-loop thread,
beside the others in flight. How many: the buffer's capacity, which a process serving async
lambdas grows by its async slots (workers.worker). Everything else is the sync path's:

- the task is begun in the buffer, so the heartbeat renews its lease while its coroutine runs,
  a cancel is heard the same way (`ctx.cancelled`), and it stays covered until its result is
  durable;
- the main thread's time limits and cancels (workers.time_limits) stop it as they stop a sync
  lambda: no more heartbeats, the `timeout` or `cancelled` attempt recorded at once. The
  buffer's interrupt reaches no thread (the attempt has none: interrupts.NO_THREAD); this
  loop's watcher cancels the coroutine instead, which sees asyncio.CancelledError at its
  current `await` (its message names the reason: TimeLimitExceeded, TaskCancelled);
- a lease the heartbeat found lost cancels it too (message LeaseLost), and nothing of it is
  recorded;
- what it returned or raised becomes a Result as a sync lambda's does (executor.lambda_result)
  and goes to the same result writer.

The hard limit is the sync path's too: a coroutine still running ATF_TIMEOUT_GRACE_S after its
cancel (one that swallows the CancelledError, or blocks the loop in a synchronous call, which
stalls every coroutine of the process) ends the process (WorkerProcess.abandon).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections.abc import Callable, Collection
from typing import Any, NoReturn

from tasks_core import registry, store
from tasks_core.context import LeaseLost, TaskContext
from workers import db, interrupts
from workers.batching import BatchWriterThread
from workers.buffer import Running, WorkBuffer
from workers.executor import lambda_result
from workers.results import Tally, recorded
from workers.transport import FinishedAttempt, Written

logger = logging.getLogger(__name__)

#: Seconds between two looks of the loop's watcher at its attempts (stopped? lease lost?).
WATCH_S = 0.05


def async_lambdas(names: Collection[str]) -> frozenset[str]:
    """The registered `async def` lambdas among `names`."""
    registered = set(registry.names())
    return frozenset(name for name in names
                     if name in registered and registry.get(name).is_async)


def _raise(exc: BaseException) -> NoReturn:
    raise exc


class AsyncExecutor:
    """One event-loop thread that runs the coroutines of a worker process's async lambdas."""

    def __init__(self, *, lambda_names: Collection[str], buffer: WorkBuffer, worker_id: str,
                 results: BatchWriterThread[FinishedAttempt, Written],
                 tally: Tally) -> None:
        self.lambda_names = frozenset(lambda_names)  #: the async lambdas it runs
        self.buffer, self.results, self.tally = buffer, results, tally
        self.worker_id = worker_id
        self.thread = threading.Thread(target=self._run, name="AsyncLambdaLoop", daemon=True)
        self._loop = asyncio.new_event_loop()
        self._lock = threading.Lock()
        self._started = 0  #: tasks handed here whose attempt has not ended yet
        self._ended = False  #: the loop takes no more tasks (the buffer closed, none in flight)
        #: The loop's own: the attempts in flight, by task id, and those it has cancelled.
        self._in_flight: dict[int, tuple[Running, asyncio.Task[None]]] = {}
        self._cancelled: set[int] = set()

    def in_flight(self) -> int:
        """Attempts handed here that have not ended."""
        with self._lock:
            return self._started

    # --- the executor threads' side ------------------------------------------------------

    def start(self, task: store.ClaimedTask,
              context: Callable[[store.ClaimedTask], TaskContext]) -> bool:
        """Run `task` on the loop, with the `ctx` that `context` makes, if its lambda is async;
        False (the caller runs it) if not, or once the loop has ended (an executor then runs
        the coroutine on its own thread)."""
        if task.lambda_name not in self.lambda_names:
            return False
        with self._lock:
            if self._ended:
                return False
            self._started += 1
        running = self.buffer.begin(task, time.monotonic(), interrupts.NO_THREAD)
        self._loop.call_soon_threadsafe(self._launch, task, running, context(task))
        return True

    # --- the loop's side -----------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._loop.run_until_complete(self._watch())
        finally:
            self._loop.close()
            db.reset_connection()  # a thread that ends lets go of its connection

    async def _watch(self) -> None:
        """Cancel the coroutines the worker stopped or whose lease was lost; end once the
        buffer is closed and nothing is in flight."""
        while True:
            for task_id, (running, attempt) in list(self._in_flight.items()):
                reason = running.stopped_by or (LeaseLost if running.lost else None)
                if reason is not None and task_id not in self._cancelled:
                    self._cancelled.add(task_id)
                    attempt.cancel(reason.__name__)
            with self._lock:
                if self.buffer.closed and self._started == 0:
                    self._ended = True
                    return
            await asyncio.sleep(WATCH_S)

    def _launch(self, task: store.ClaimedTask, running: Running, ctx: TaskContext) -> None:
        attempt = self._loop.create_task(self._attempt(task, running, ctx))
        self._in_flight[task.task_id] = (running, attempt)

    async def _attempt(self, task: store.ClaimedTask, running: Running,
                       ctx: TaskContext) -> None:
        try:
            outcome = await self._outcome(task, ctx)
            self._finish(task, lambda_result(outcome, started=running.started_at,
                                             worker=self.worker_id))
        except BaseException:  # noqa: BLE001 - the loop outlives anything, as executors do
            logger.exception("async executor failed around task %d", task.task_id,
                             extra={"action": "executor_restart", "task_id": task.task_id})
            self.buffer.end(task)
        finally:
            self._in_flight.pop(task.task_id, None)
            self._cancelled.discard(task.task_id)
            with self._lock:
                self._started -= 1

    @staticmethod
    async def _outcome(task: store.ClaimedTask, ctx: TaskContext) -> Callable[[], Any]:
        """What the lambda's coroutine returned or raised, to be read by calling it."""
        try:
            value = await registry.get(task.lambda_name)(ctx, task.payload)
        except BaseException as exc:  # noqa: BLE001 - its cancel included: the attempt's outcome
            return functools.partial(_raise, exc)
        return lambda: value

    def _finish(self, task: store.ClaimedTask, result: store.Result) -> None:
        """Hand the result to the result writer, unless the attempt was stopped (its end is
        recorded already) or lost its lease."""
        running = self.buffer.finishing(task)
        if running.discard:
            if running.lost:
                logger.error("task %d finished after losing its lease; result discarded",
                             task.task_id, extra={"action": "result_discarded"})
            self.buffer.end(task)
            return
        finished = [(task, result)]
        self.results.submit(finished).add_done_callback(
            functools.partial(recorded, self.buffer, self.tally, finished,
                              writer=self.results))
