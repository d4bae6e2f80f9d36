"""Debounce and limit keys at scheduling: what `schedule(..., limit_key=, debounce=,
debounce_key=)` asks for, checked, and the debounced schedule itself.

A debounced schedule takes a transaction-scoped lock on (lambda, debounce key), so concurrent
schedules of one key see each other: while an earlier task with the key still waits (`new` or
`enqueued`, not yet started) it gets the new payload and is due `debounce` seconds from now (the
same task id comes back); once it has started, a new task is made.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from django.db.models import F

from tasks_core import flow, limits, shards
from tasks_core.models import TaskAssoc, TaskEntity
from tasks_core.states import AssocStatus, TaskStatus
from tasks_core.store.values import NewTask

#: Characters of a limit key or a debounce key (their columns' length).
KEY_CHARS = 200
_WAITING = (TaskStatus.NEW, TaskStatus.ENQUEUED)


def _key_problem(name: str, key: Any) -> str | None:
    if key is None:
        return None
    if not isinstance(key, str) or not key or len(key) > KEY_CHARS or limits.bad_text(key):
        return f"{name} must be a non-empty string of at most {KEY_CHARS} characters."
    return None


def check(*, limit_key: Any, debounce: Any, debounce_key: Any, run_at: Any, delay: Any,
          idempotency_key: Any, after: Any) -> dict[str, list[str]]:
    """The problems of a request's flow fields, by field (empty: none)."""
    errors = {name: [problem] for name, key in (("limit_key", limit_key),
                                                ("debounce_key", debounce_key))
              if (problem := _key_problem(name, key))}
    if debounce is None:
        if debounce_key is not None:
            errors["debounce_key"] = ["debounce_key needs debounce (seconds)."]
        return errors
    if isinstance(debounce, bool) or not isinstance(debounce, int | float) \
            or not 0 < debounce <= limits.MAX_DELAY_S:
        errors["debounce"] = [f"debounce must be a number of seconds above 0, at most "
                              f"{limits.MAX_DELAY_S:.0f}."]
    elif debounce_key is None:
        errors["debounce_key"] = ["debounce needs a debounce_key."]
    elif run_at is not None or delay is not None:
        errors["debounce"] = ["Give debounce or run_at/delay, not both."]
    elif idempotency_key is not None:
        errors["debounce"] = ["Give debounce or idempotency_key, not both."]
    elif after:
        errors["debounce"] = ["A task that waits for parents (after) cannot be debounced."]
    return errors


def schedule(task: NewTask, *, now: datetime,
             create: Callable[[Sequence[NewTask], datetime], list[TaskEntity]],
             ) -> tuple[TaskEntity, bool]:
    """Schedule a debounced task (its run_at is now + debounce): replace the waiting task of
    its key, or make one with `create`; the task, and whether it was made."""
    assert task.debounce_key is not None
    with shards.atomic():
        flow.lock([flow.lock_id(task.lambda_id, f"debounce\x00{task.debounce_key}")])
        waiting = (TaskEntity.objects.select_for_update()
                   .filter(lambda_ref_id=task.lambda_id, debounce_key=task.debounce_key,
                           status__in=_WAITING)
                   .order_by("pk").first())
        if waiting is None:
            return create([task], now)[0], True
        # An enqueued task goes back to `new` under a new lease: its queued message is stale.
        TaskEntity.objects.filter(pk=waiting.pk).update(
            payload=task.payload, run_at=task.run_at, status=TaskStatus.NEW, worker="",
            lease=F("lease") + (1 if waiting.status == TaskStatus.ENQUEUED else 0))
        TaskAssoc.objects.filter(task_id=waiting.pk).update(status=AssocStatus.NEW,
                                                            next_trigger_at=task.run_at)
        waiting.refresh_from_db()
    return waiting, False
