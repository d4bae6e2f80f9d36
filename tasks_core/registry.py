"""The lambda registry behind `atf.register`: name -> callable and options; no duplicates.

It holds code only, and imports nothing that reads or writes the store: tasks_core.lambda_sync
writes its lambdas to the store, `atf.register` adds their code schedules (tasks_core.periodic),
and tasks_core.apps wires in the scheduler behind `RegisteredLambda.schedule`.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tasks_core import lambda_names
from tasks_core.conf import atf_settings
from tasks_core.exceptions import (
    ConfigurationError,
    DuplicateLambda,
    InvalidLambdaDefinition,
    LambdaNotFound,
)
from tasks_core.lambda_options import OptionValues, code_values, defaulted

if TYPE_CHECKING:
    from tasks_core.context import TaskContext
    from tasks_core.models import TaskEntity

LambdaFunction = Callable[["TaskContext", Any], Any]


@dataclass(frozen=True, kw_only=True)
class LambdaOptions(OptionValues):
    """A lambda's team and its options as the code gives them (declared in lambda_options)."""

    team: str
    #: The options the code left to their defaults (lambda_options.defaulted).
    defaulted: frozenset[str] = frozenset()


class RegisteredLambda:
    """A lambda as the code defines it; calling `.schedule(...)` schedules a task of it."""

    def __init__(self, name: str, func: LambdaFunction, options: LambdaOptions) -> None:
        self.name = name
        self.func = func
        self.options = options
        #: True when the lambda logs a failure that ends its task itself (the Django tasks
        #: backend does, through Django's signals): the worker then logs no second traceback.
        self.reports_failures = False
        #: An `async def` lambda: a worker runs its coroutine on its event loop
        #: (workers.async_executor), many at once on one thread.
        self.is_async = inspect.iscoroutinefunction(func)
        self.__doc__ = func.__doc__
        self.__wrapped__ = func

    def __call__(self, ctx: TaskContext, payload: Any) -> Any:
        return self.func(ctx, payload)

    def schedule(self, payload: Any = None, **options: Any) -> TaskEntity:
        """Schedule a task of this lambda (as `atf.schedule(name, payload, **options)`)."""
        if _scheduler is None:
            raise ConfigurationError("no scheduler: the tasks_core app is not ready")
        return _scheduler(self.name, payload, **options)

    def __repr__(self) -> str:
        return f"<lambda {self.name}>"


#: Schedules a task of a lambda by name; tasks_core.apps sets it (to atf.schedule).
Scheduler = Callable[..., "TaskEntity"]

_lock = threading.Lock()
_lambdas: dict[str, RegisteredLambda] = {}
_scheduler: Scheduler | None = None


def use_scheduler(scheduler: Scheduler) -> None:
    """Make `scheduler` the one behind every `RegisteredLambda.schedule`."""
    global _scheduler
    _scheduler = scheduler


def register(
    name: str, *, team: str | None = None, **options: float | None,
) -> Callable[[LambdaFunction], RegisteredLambda]:
    """Decorator: register `func(ctx, payload)` as the lambda `name` with these options.

    The options are those tasks_core.lambda_options declares (`max_attempts`,
    `heartbeat_timeout`, `backoff_base`, `backoff_cap`, `quota`, `timeout`); one not given
    takes its default. `timeout` is the seconds one attempt may run (default
    ATF_TASK_TIMEOUT_S; 0: no limit); an attempt past it ends with outcome `timeout` and is
    retried like a failure. An unknown option is an UnknownLambdaOption (a TypeError), a bad
    value an InvalidLambdaOption (a ValueError).
    """
    lambda_names.check(name)
    try:
        values = code_values(options)
    except InvalidLambdaDefinition as exc:
        raise type(exc)(f"lambda {name!r}: {exc}") from None
    settled = LambdaOptions(team=team or atf_settings.default_team,
                            defaulted=defaulted(options), **values)

    def decorate(func: LambdaFunction) -> RegisteredLambda:
        if inspect.isasyncgenfunction(func):
            raise InvalidLambdaDefinition(
                f"lambda {name!r}: an async generator cannot be a lambda (a task has one "
                f"result): return it from an async def")
        registered = RegisteredLambda(name, func, settled)
        with _lock:
            if name in _lambdas:
                raise DuplicateLambda(f"lambda {name!r} is registered already")
            _lambdas[name] = registered
        return registered

    return decorate


def unregister(name: str) -> None:
    """Forget a lambda (tests that register their own)."""
    with _lock:
        _lambdas.pop(name, None)


def get(name: str) -> RegisteredLambda:
    try:
        return _lambdas[name]
    except KeyError:
        raise LambdaNotFound(f"unknown lambda {name!r}") from None


def names() -> list[str]:
    return sorted(_lambdas)
