"""ATF's options on a `@task` function: the Task class of the ATF backend.

Django 6.1's `@task(**options)` (and the django-tasks backport's) hands the options it does not
know itself to the backend's `task_class`. `ATFTask` takes ATF's:

    @task(max_attempts=5, timeout=30, backoff_base=2, lambda_name="shop.send_receipt")
    def send_receipt(order_id: int) -> None: ...

    send_receipt.using(idempotency_key=f"receipt-{order.pk}").enqueue(order.pk)

Per task: `max_attempts`, `timeout` (seconds an attempt may run; 0: no limit) and
`collection` (default: the queue name). With `lambda_name` the function runs as an ATF lambda
of its own, which takes the lambda's options too: `team`, `quota` (tasks a second),
`heartbeat_timeout`, `backoff_base` and `backoff_cap`. `idempotency_key` is given per
enqueue, through `using()`. Any other option is refused with the list of those there are.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, cast

from tasks_core.contrib.tasks_compat import InvalidTaskError, Task

#: Options of a task in any lambda (schedule() options).
TASK_OPTIONS = ("max_attempts", "timeout", "collection")
#: Options of a lambda: they need the task to run as a lambda of its own (`lambda_name`).
LAMBDA_OPTIONS = ("team", "quota", "heartbeat_timeout", "backoff_base", "backoff_cap")
#: Options given per enqueue, through `using()`.
ENQUEUE_OPTIONS = ("idempotency_key",)


@dataclass(frozen=True, slots=True, kw_only=True, init=False)
class ATFTask(Task):
    """A `@task` function with ATF's options (see the module's docstring)."""

    lambda_name: str | None = None
    max_attempts: int | None = None
    timeout: float | None = None
    collection: str | None = None
    team: str | None = None
    quota: float | None = None
    heartbeat_timeout: float | None = None
    backoff_base: float | None = None
    backoff_cap: float | None = None
    idempotency_key: str | None = None

    def __init__(self, **options: Any) -> None:
        known = {f.name for f in fields(ATFTask)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise TypeError(
                f"@task got unknown option(s) {', '.join(unknown)}; the ATF backend takes "
                f"{', '.join((*TASK_OPTIONS, 'lambda_name', *LAMBDA_OPTIONS))} (and "
                "idempotency_key through using())")
        base = {f.name for f in fields(Task)}
        for name in known - base:
            object.__setattr__(self, name, options.pop(name, None))
        Task.__init__(self, **options)

    def using(self, *, idempotency_key: str | None = None, **changes: Any) -> ATFTask:
        """Django's `using()` (priority, queue_name, run_after, backend), and
        `idempotency_key`: a second enqueue with the same key returns the first task."""
        task = cast(ATFTask, Task.using(self, **changes))
        return task if idempotency_key is None else replace(task, idempotency_key=idempotency_key)

    def atf_errors(self) -> list[str]:
        """What is wrong with the ATF options, for the backend's validate_task."""
        errors = []
        if self.lambda_name is None:
            needing = [name for name in LAMBDA_OPTIONS if getattr(self, name) is not None]
            if needing:
                errors.append(f"{', '.join(needing)} need the task to run as a lambda of its "
                              "own: give lambda_name too")
        elif not self.lambda_name.strip():
            errors.append("lambda_name must not be empty")
        if self.max_attempts is not None and not (isinstance(self.max_attempts, int)
                                                  and self.max_attempts >= 1):
            errors.append("max_attempts must be a whole number of at least 1")
        for name in ("quota", "heartbeat_timeout", "backoff_cap"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, int | float) and value > 0):
                errors.append(f"{name} must be a number above 0")
        for name in ("timeout", "backoff_base"):  # a timeout of 0 lifts the time limit
            value = getattr(self, name)
            if value is not None and not (isinstance(value, int | float) and value >= 0):
                errors.append(f"{name} must be a number of seconds, 0 or more")
        return errors


def check(task: ATFTask) -> None:
    """Raise Django's InvalidTask (the backport's InvalidTaskError) for bad ATF options."""
    if errors := task.atf_errors():
        raise InvalidTaskError(f"{task.module_path}: {'; '.join(errors)}")
