"""Attempts as the tests read and make them: through the store, as workers leave them."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from django.utils import timezone

from tasks_core import attempt_history, store
from tasks_core.gating import Decision
from tasks_core.models import TaskAttempt, TaskEntity
from tasks_core.store.values import Outcome


def attempts_of(task_id: int) -> list[TaskAttempt]:
    """Every attempt at a task, oldest first, as its readers see them (a success has no row of
    its own: tasks_core.attempt_history)."""
    return attempt_history.everything(TaskEntity.objects.get(pk=task_id))


def fail_then_succeed(task: TaskEntity, workers: Sequence[str]) -> None:
    """Run `task` (due, of a lambda with no other task due) once per worker, through the store
    as the consumer and the workers would: every attempt but the last fails and is retried at
    once, the last succeeds."""
    now = timezone.now()
    for number, worker in enumerate(workers, start=1):
        batch = store.enqueue_due(task.lambda_ref_id, limit=10, now=now, skip_collections=[],
                                  decide=lambda collection: Decision.ENQUEUE)
        (claimed,) = store.claim([message for _priority, message in batch.messages],
                                 worker=worker, lambda_ids=[task.lambda_ref_id], now=now)
        assert store.start(claimed, now=now)
        last = number == len(workers)
        result = store.Result(
            outcome=Outcome.SUCCESS if last else Outcome.RETRY, value={"n": number},
            error=None if last else {"type": "ValueError", "message": "boom", "traceback": ""},
            delay_s=0, started_at=now, worker=worker)
        store.finish(claimed, result, now=now)
        now += timedelta(seconds=1)
