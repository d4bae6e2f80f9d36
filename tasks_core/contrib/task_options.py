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

from tasks_core import lambda_names
from tasks_core.contrib.tasks_compat import InvalidTaskError, Task
from tasks_core.exceptions import InvalidLambdaDefinition, UnknownLambdaOption
from tasks_core.lambda_options import BY_NAME, OPTIONS

#: Options of a task in any lambda (schedule() options).
TASK_OPTIONS = (*(option.name for option in OPTIONS if option.per_task), "collection")
#: Options of a lambda: they need the task to run as a lambda of its own (`lambda_name`).
LAMBDA_OPTIONS = ("team", *(option.name for option in OPTIONS if not option.per_task))
#: Options given per enqueue, through `using()`.
ENQUEUE_OPTIONS = ("idempotency_key",)


class InvalidTaskOptions(InvalidTaskError, InvalidLambdaDefinition):
    """A `@task` function's ATF options are not valid: Django's InvalidTask (the backport's
    InvalidTaskError), and ATF's InvalidLambdaDefinition, which ends a process that imports it
    while the apps load in one line."""


@dataclass(frozen=True, slots=True, kw_only=True, init=False)
class ATFTask(Task):
    """A `@task` function with ATF's options (see the module's docstring)."""

    lambda_name: str | None = None
    collection: str | None = None
    team: str | None = None
    idempotency_key: str | None = None
    #: The lambda options given (tasks_core.lambda_options declares them): (name, value) pairs.
    option_values: tuple[tuple[str, Any], ...] = ()

    def __init__(self, **options: Any) -> None:
        unknown = sorted(set(options) - {f.name for f in fields(ATFTask)} - set(BY_NAME))
        if unknown:
            func = options.get("func")
            where = f"{func.__module__}.{func.__qualname__}: " if func is not None else ""
            raise UnknownLambdaOption(
                f"{where}@task got unknown option(s) {', '.join(unknown)}; the ATF backend takes "
                f"{', '.join((*TASK_OPTIONS, 'lambda_name', *LAMBDA_OPTIONS))} (and "
                "idempotency_key through using())")
        # `option_values` is given by dataclasses.replace (Task.using), the options by @task.
        given = dict(options.pop("option_values", ()))
        given.update((name, options.pop(name)) for name in BY_NAME if name in options)
        object.__setattr__(self, "option_values", tuple(given.items()))
        for name in {f.name for f in fields(ATFTask)} - {f.name for f in fields(Task)} - {
                "option_values"}:
            object.__setattr__(self, name, options.pop(name, None))
        Task.__init__(self, **options)

    def option(self, name: str) -> Any:
        """The value given for the declared option `name`, or None."""
        return dict(self.option_values).get(name)

    def per_task_options(self) -> dict[str, Any]:
        """The options given that a task of any lambda takes when it is scheduled."""
        return {name: value for name, value in self.option_values if BY_NAME[name].per_task}

    def lambda_options(self) -> dict[str, Any]:
        """What its own lambda is registered with: its team and every option given."""
        return {"team": self.team, **dict(self.option_values)}

    def using(self, *, idempotency_key: str | None = None, **changes: Any) -> ATFTask:
        """Django's `using()` (priority, queue_name, run_after, backend), and
        `idempotency_key`: a second enqueue with the same key returns the first task."""
        task = cast(ATFTask, Task.using(self, **changes))
        return task if idempotency_key is None else replace(task, idempotency_key=idempotency_key)

    def atf_errors(self) -> list[str]:
        """What is wrong with the ATF options, for the backend's validate_task."""
        errors = []
        if self.lambda_name is None:
            needing = [name for name in LAMBDA_OPTIONS
                       if (self.team if name == "team" else self.option(name)) is not None]
            if needing:
                errors.append(f"{', '.join(needing)} {'needs' if len(needing) == 1 else 'need'} "
                              "the task to run as a lambda of its own: give lambda_name too")
        elif problem := lambda_names.problem(self.lambda_name):
            errors.append(f"lambda_name: {problem}")
        errors.extend(problem for name, value in self.option_values
                      if value is not None and (problem := BY_NAME[name].code_problem(value)))
        return errors


def check(task: ATFTask) -> None:
    """Raise InvalidTaskOptions (Django's InvalidTask) for bad ATF options."""
    if errors := task.atf_errors():
        raise InvalidTaskOptions(f"{task.module_path}: {'; '.join(errors)}")
