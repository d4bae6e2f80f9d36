"""Stopping attempts: past their task's time limit (outcome `timeout`), or cancelled.

The worker's main thread calls `enforce()` a few times a second. A task past its deadline is no
longer heartbeated, its attempt is recorded at once as `timeout` (error `TimeLimitExceeded`;
retried per the lambda's policy, `dead` when its attempts are used up), and its executor thread
is interrupted. A task a cancel asked to stop (its heartbeat heard) goes the same way, recorded
`cancelled` (error `TaskCancelled`; the task ends `cancelled`). Whatever the lambda does
afterwards is discarded, and the store would refuse it anyway: the task has left `processing`.
The retry is not due before twice the grace (store.decisions.ending), so a lambda that stops
within the grace never runs at the same time as its retry; one that does not stop makes its
worker process exit at the end of the grace (see WorkerProcess.abandon), before the retry can start.
"""

from __future__ import annotations

import functools
import logging
from concurrent.futures import Future

from tasks_core import store
from tasks_core.context import TaskCancelled, TimeLimitExceeded
from workers.batching import BatchWriterThread
from workers.buffer import Running, WorkBuffer
from workers.results import Tally, log_outcome
from workers.transport import UNREACHED, FinishedAttempt, Written

logger = logging.getLogger(__name__)



def stopped_result(running: Running, *, worker: str) -> store.Result:
    """The outcome recorded for an attempt its worker stopped: past its time limit, or
    cancelled."""
    if running.stopped_by is TaskCancelled:
        outcome, message = store.Outcome.CANCELLED, "a cancel stopped the running task"
    else:
        outcome = store.Outcome.TIMEOUT
        message = f"the attempt ran past its time limit of {running.task.timeout_s:g}s"
    error = {"type": (running.stopped_by or TimeLimitExceeded).__name__, "traceback": "",
             "message": message}
    return store.Result(outcome=outcome, error=error, started_at=running.started_at,
                        worker=worker)


class AttemptStops:
    """Ends the attempts of a worker process's tasks that run past their time limit or that a
    cancel asked to stop."""

    def __init__(self, *, buffer: WorkBuffer,
                 results: BatchWriterThread[FinishedAttempt, Written], worker_id: str,
                 tally: Tally, grace_s: float) -> None:
        self.buffer = buffer
        self.results = results
        self.worker_id = worker_id
        self.tally = tally
        self.grace_s = grace_s

    def enforce(self, now_s: float) -> list[Running]:
        """Stop the tasks past their deadline or cancelled; return the ones whose lambda has
        not stopped within the grace after its interrupt."""
        for running in self.buffer.stop_due(now_s):
            task = running.task
            if running.stopped_by is TaskCancelled:
                logger.warning("task %d (%s) was cancelled while running; its lambda is "
                               "interrupted", task.task_id, task.lambda_name,
                               extra={"action": "task_cancelled", "task_id": task.task_id})
            else:
                logger.warning("task %d (%s) ran past its time limit of %gs; its lambda is "
                               "interrupted", task.task_id, task.lambda_name, task.timeout_s,
                               extra={"action": "task_timeout", "task_id": task.task_id})
            result = stopped_result(running, worker=self.worker_id)
            self.results.submit([(task, result)]).add_done_callback(
                functools.partial(self._recorded, task, result)
            )
        return self.buffer.hung(now_s, self.grace_s)

    def _recorded(self, task: store.ClaimedTask, result: store.Result,
                  future: Future[list[Written]]) -> None:
        if (exc := future.exception()) is not None:
            logger.error("task %d: its stop could not be recorded (%s); it will be retried "
                         "after its heartbeat timeout", task.task_id, exc)
            return
        (status,) = future.result()
        if status is UNREACHED:  # its shard is down: written once it is back
            self.results.park([(task, result)]).add_done_callback(
                functools.partial(self._recorded, task, result))
            return
        log_outcome(task, result, status, self.tally)
