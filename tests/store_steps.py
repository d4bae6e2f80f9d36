"""The store's steps as the consumer and a worker take them, for tests that walk a task through
its lifecycle without processes: enqueue what is due, claim its messages, run attempts."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from django.utils import timezone

from tasks_core import store
from tasks_core.gating import Decision
from tasks_core.models import Lambda, TaskEntity
from tasks_core.queues import Message
from tasks_core.store.values import Outcome


def enqueue_due(lambda_name: str, now: datetime, limit: int = 1000) -> store.DueBatch:
    return store.enqueue_due(Lambda.objects.get(name=lambda_name).pk, limit=limit, now=now,
                             skip_collections=[], decide=lambda collection: Decision.ENQUEUE)


def messages(batch: store.DueBatch) -> list[Message]:
    return [message for _priority, message in batch.messages]


def claim(msgs: list[Message], now: datetime, worker: str = "w1") -> list[store.ClaimedTask]:
    lambda_ids = Lambda.objects.values_list("pk", flat=True)
    return store.claim(msgs, worker=worker, lambda_ids=list(lambda_ids), now=now)


def fail_then_succeed(task: TaskEntity, workers: Sequence[str]) -> None:
    """Run `task` (due, of a lambda with no other task due) once per worker: every attempt but
    the last fails and is retried at once, the last succeeds."""
    now = timezone.now()
    for number, worker in enumerate(workers, start=1):
        (claimed,) = claim(messages(enqueue_due(task.lambda_ref.name, now)), now, worker)
        assert store.start(claimed, now=now)
        last = number == len(workers)
        result = store.Result(
            outcome=Outcome.SUCCESS if last else Outcome.RETRY, value={"n": number},
            error=None if last else {"type": "ValueError", "message": "boom", "traceback": ""},
            delay_s=0, started_at=now, worker=worker)
        store.finish(claimed, result, now=now)
        now += timedelta(seconds=1)
