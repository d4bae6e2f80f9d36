"""The one import for users: `from tasks_core import atf`.

    @atf.register("billing.send_invoice", max_attempts=5, heartbeat_timeout=30)
    def send_invoice(ctx, payload): ...

    atf.schedule("billing.send_invoice", {"order": 7}, priority="high", delay=300)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from django.utils import timezone

from tasks_core import groups, periodic, registry, scheduling
from tasks_core.context import (
    Fatal,
    LeaseLost,
    Retry,
    TaskCancelled,
    TaskContext,
    TimeLimitExceeded,
)
from tasks_core.exceptions import ConfigurationError, TaskNotFound
from tasks_core.groups import ChainRequest, GroupRequest
from tasks_core.models import TaskEntity, TaskGroup
from tasks_core.periodic import every
from tasks_core.registry import LambdaFunction, RegisteredLambda
from tasks_core.scheduling import TaskRequest

#: One task to schedule, for `schedule_many` or as a step of `chain`:
#: `atf.call(lambda_name, payload, priority=..., ...)`, with the options of `schedule`.
call = TaskRequest
#: The older name of a task request (a chain's step).
Call = TaskRequest

__all__ = [
    "Call", "ChainRequest", "Fatal", "GroupRequest", "LeaseLost", "Retry", "TaskCancelled",
    "TaskContext", "TaskNotFound", "TaskRequest", "TimeLimitExceeded", "call", "cancel", "chain",
    "every", "get", "get_group", "group", "register", "schedule", "schedule_many",
]


def register(name: str, *, schedule: periodic.ScheduleValue | None = None,
             **options: Any) -> Callable[[LambdaFunction], RegisteredLambda]:
    """Decorator: register `func(ctx, payload)` as the lambda `name`; options: team,
    max_attempts, heartbeat_timeout, backoff_base, backoff_cap, quota, timeout, concurrency,
    rate, key_concurrency, key_rate (see tasks_core.lambda_options).

    `schedule` also runs it periodically with an empty payload: a cron expression such as
    "*/5 * * * *", or an interval in seconds (see `tasks_core.periodic`).
    """
    decorate = registry.register(name, **options)

    def decorate_and_schedule(func: LambdaFunction) -> RegisteredLambda:
        if schedule is not None:
            periodic.parse_schedule(schedule)  # a bad schedule registers nothing
        registered = decorate(func)
        if schedule is not None:
            try:
                periodic.every(schedule, name, name=name)
            except ConfigurationError:
                registry.unregister(name)
                raise
        return registered

    return decorate_and_schedule


def schedule(lambda_name: str, payload: Any = None, *, collection: str | None = None,
             priority: str | None = None, run_at: datetime | None = None,
             delay: float | None = None, idempotency_key: str | None = None,
             max_attempts: int | None = None, timeout: float | None = None,
             after: Sequence[int] = (), limit_key: str | None = None,
             debounce: float | None = None, debounce_key: str | None = None) -> TaskEntity:
    """Schedule a task of `lambda_name` (see TaskRequest for each option: `delay`, `timeout`
    and `debounce` are seconds, `after` the parent task ids, `limit_key` what the lambda's
    keyed limits count the task under)."""
    task, _created = scheduling.schedule(TaskRequest(
        lambda_name, payload, collection=collection, priority=priority, run_at=run_at,
        delay=delay, idempotency_key=idempotency_key, max_attempts=max_attempts,
        timeout=timeout, after=after, limit_key=limit_key, debounce=debounce,
        debounce_key=debounce_key))
    return task


def schedule_many(requests: Sequence[TaskRequest | Mapping[str, Any]]) -> list[TaskEntity]:
    """Schedule many tasks at once, all or none: `atf.call(...)` requests (or mappings of
    "lambda", "payload" and options)."""
    return scheduling.schedule_many(requests)


def get(task_id: int) -> TaskEntity:
    """The task `task_id`, as `schedule()` returns it (`status`, `result`, `is_finished`,
    `refresh()`), whatever its team: this is the store read in-process, not the API's scoped
    one. Raises `atf.TaskNotFound` (a LookupError) for an id no task has."""
    try:
        return TaskEntity.objects.select_related("lambda_ref").get(pk=task_id)
    except TaskEntity.DoesNotExist:
        raise TaskNotFound(f"no task {task_id}") from None


def cancel(task_id: int) -> TaskEntity:
    """Cancel a task that no worker holds yet."""
    return scheduling.cancel(task_id, now=timezone.now())


def chain(*requests: TaskRequest | GroupRequest) -> list[TaskEntity]:
    """Schedule steps that run one after another, each once the step before it succeeded; a
    step may be a group (`atf.GroupRequest`), which waits as a whole (tasks_core.groups)."""
    return groups.chain(*requests)


def group(tasks: Sequence[TaskRequest | ChainRequest | Mapping[str, Any]], *,
          then: TaskRequest | Mapping[str, Any] | None = None,
          on_failure: TaskRequest | Mapping[str, Any] | None = None,
          idempotency_key: str | None = None) -> TaskGroup:
    """Schedule `tasks` together, all or none (with the caller's transaction): `then` runs
    once, after every one of them succeeded, and reads their results in order with
    `ctx.parent_results()`; if one ends fatal_failure, dead, cancelled or dropped, `then`
    never runs and `on_failure` runs once. Returns the group (`id`, `status`, `refresh()`).

    A member may be a chain, `atf.ChainRequest([atf.call(...), ...])`: its steps run one after
    another and it succeeded when its last one did. A member whose idempotency key names an
    existing task of its lambda is that task (which may not be in another group); with an
    `idempotency_key` of its own, a second call returns the first group."""
    return groups.schedule(GroupRequest(tasks, then=then, on_failure=on_failure,
                                        idempotency_key=idempotency_key))


def get_group(group_id: int) -> TaskGroup:
    """The group `group_id`; raises `atf.TaskNotFound` for an id no group has."""
    try:
        return TaskGroup.objects.get(pk=group_id)
    except TaskGroup.DoesNotExist:
        raise TaskNotFound(f"no group {group_id}") from None
