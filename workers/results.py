"""Outcomes of finished attempts: how they are counted and logged."""

from __future__ import annotations

import functools
import logging
import threading
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import Future

from tasks_core import registry, store
from tasks_core.exceptions import LambdaNotFound
from tasks_core.states import TaskStatus
from workers.batching import BatchWriterThread
from workers.buffer import WorkBuffer
from workers.transport import UNREACHED, FinishedAttempt, Written

logger = logging.getLogger(__name__)


class Tally:
    """Outcomes counted across a process, for the periodic summary line."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def add(self, outcome: str, count: int = 1) -> None:
        with self._lock:
            self._counts[outcome] += count

    def take(self) -> Counter[str]:
        with self._lock:
            counts, self._counts = self._counts, Counter()
            return counts


def log_outcomes(finished: Sequence[FinishedAttempt], statuses: Sequence[TaskStatus | None],
                 tally: Tally) -> None:
    """Count a run's outcomes (one tally update for its successes) and log the notable ones;
    a success costs nothing more unless DEBUG is on."""
    successes = 0
    debug = logger.isEnabledFor(logging.DEBUG)
    for (task, result), status in zip(finished, statuses, strict=True):
        if status is TaskStatus.SUCCESS and not debug:
            successes += 1
        else:
            log_outcome(task, result, status, tally)
    if successes:
        tally.add(str(TaskStatus.SUCCESS), successes)


def log_outcome(task: store.ClaimedTask, result: store.Result, status: TaskStatus | None,
                tally: Tally) -> None:
    """One line per notable outcome: dead and fatal at ERROR, retries at WARNING."""
    tally.add(str(status or "stale"))
    if status is TaskStatus.SUCCESS and not logger.isEnabledFor(logging.DEBUG):
        return
    extra = {"action": f"task_{status or 'stale'}", "task_id": task.task_id}
    error = result.error or {}
    if status is None:
        logger.warning("task %d: result refused, its lease moved on", task.task_id,
                       extra=extra)
    elif status in (TaskStatus.DEAD, TaskStatus.FATAL_FAILURE) and _reported(task):
        logger.info("task %d (%s) ended %s after attempt %d: %s: %s", task.task_id,
                    task.lambda_name, status, task.attempt, error.get("type"),
                    error.get("message"), extra=extra)
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


def recorded(buffer: WorkBuffer, tally: Tally, finished: list[FinishedAttempt],
             future: Future[list[Written]], *,
             writer: BatchWriterThread[FinishedAttempt, Written]) -> None:
    """The result writer's answer about results handed over together (in the writer's
    thread): their tasks leave the buffer (their ends are durable, or they run again after
    their heartbeat timeout), and their outcomes are logged. Results whose shard could not
    be reached (UNREACHED) are parked with `writer`, tried again until it is back; their
    tasks stay in the buffer meanwhile, where the heartbeat covers them."""
    if (exc := future.exception()) is not None:
        for task, _result in finished:
            buffer.end(task)
        logger.error("%d task(s) (%s): their results could not be recorded (%s); they run "
                     "again after their heartbeat timeout", len(finished),
                     ", ".join(str(task.task_id) for task, _result in finished), exc,
                     extra={"action": "result_unrecorded", "task_id": finished[0][0].task_id})
        return
    statuses = future.result()
    if parked := unreached(finished, statuses):
        logger.debug("%d result(s) wait for their shard", len(parked))
        writer.park(parked).add_done_callback(
            functools.partial(recorded, buffer, tally, parked, writer=writer))
    written = [(pair, status) for pair, status in zip(finished, statuses, strict=True)
               if status is not UNREACHED]
    for (task, _result), _status in written:
        buffer.end(task)
    log_outcomes([pair for pair, _status in written],
                 [status for _pair, status in written], tally)


def unreached(finished: Sequence[FinishedAttempt],
              statuses: Sequence[Written]) -> list[FinishedAttempt]:
    """The results among `finished` whose shard could not be reached."""
    return [pair for pair, status in zip(finished, statuses, strict=True)
            if status is UNREACHED]


def _reported(task: store.ClaimedTask) -> bool:
    """Whether the task's lambda logged its failure itself, traceback and all."""
    try:
        return registry.get(task.lambda_name).reports_failures
    except LambdaNotFound:
        return False
