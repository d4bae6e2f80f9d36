"""Outcomes of finished attempts: how they are counted and logged."""

from __future__ import annotations

import logging
import threading
from collections import Counter
from concurrent.futures import Future

from tasks_core import registry, store
from tasks_core.states import TaskStatus
from workers.buffer import WorkBuffer

logger = logging.getLogger(__name__)


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


def log_outcome(task: store.ClaimedTask, result: store.Result, status: TaskStatus | None,
                tally: Tally) -> None:
    """One line per notable outcome: dead and fatal at ERROR, retries at WARNING."""
    tally.add(str(status or "stale"))
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


def recorded(buffer: WorkBuffer, tally: Tally, task: store.ClaimedTask, result: store.Result,
             future: Future[TaskStatus | None]) -> None:
    """The result writer's answer about a lambda's result: the task leaves the buffer (its
    end is durable, or it runs again after its heartbeat timeout), and its outcome is logged."""
    buffer.end(task)
    if (exc := future.exception()) is not None:
        logger.error("task %d: its result could not be recorded (%s); it runs again after "
                     "its heartbeat timeout", task.task_id, exc,
                     extra={"action": "result_unrecorded", "task_id": task.task_id})
        return
    log_outcome(task, result, future.result(), tally)


def _reported(task: store.ClaimedTask) -> bool:
    """Whether the task's lambda logged its failure itself, traceback and all."""
    return (task.lambda_name in registry.names()
            and registry.get(task.lambda_name).reports_failures)
