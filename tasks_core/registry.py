"""The lambda registry behind `atf.register`: name -> callable and options; no duplicates.

It holds code only, and imports nothing that reads or writes the store: tasks_core.lambda_sync
writes its lambdas to the store, `atf.register` adds their code schedules (tasks_core.periodic),
and tasks_core.apps wires in the scheduler behind `RegisteredLambda.schedule`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tasks_core.conf import atf_settings
from tasks_core.exceptions import ConfigurationError, DuplicateLambda, LambdaNotFound

if TYPE_CHECKING:
    from tasks_core.context import TaskContext
    from tasks_core.models import TaskEntity

LambdaFunction = Callable[["TaskContext", Any], Any]


@dataclass(frozen=True, kw_only=True)
class LambdaOptions:
    team: str
    max_attempts: int
    heartbeat_timeout_s: float
    backoff_base_s: float
    backoff_cap_s: float
    quota_per_s: float | None
    timeout_s: float | None  #: seconds one attempt may run; None: no limit


class RegisteredLambda:
    """A lambda as the code defines it; calling `.schedule(...)` schedules a task of it."""

    def __init__(self, name: str, func: LambdaFunction, options: LambdaOptions) -> None:
        self.name = name
        self.func = func
        self.options = options
        #: True when the lambda logs a failure that ends its task itself (the Django tasks
        #: backend does, through Django's signals): the worker then logs no second traceback.
        self.reports_failures = False
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


def _default_timeout_s() -> float | None:
    """ATF_TASK_TIMEOUT_S as seconds; None for no limit (the setting is 0 or None)."""
    value = atf_settings.task_timeout_s
    return None if value is None else float(value) or None


def register(
    name: str,
    *,
    team: str | None = None,
    max_attempts: int | None = None,
    heartbeat_timeout: float | None = None,
    backoff_base: float | None = None,
    backoff_cap: float | None = None,
    quota: float | None = None,
    timeout: float | None = None,
) -> Callable[[LambdaFunction], RegisteredLambda]:
    """Decorator: register `func(ctx, payload)` as the lambda `name` with these options.

    `timeout` is the seconds one attempt may run (default ATF_TASK_TIMEOUT_S; 0: no limit);
    an attempt past it ends with outcome `timeout` and is retried like a failure.
    """
    options = LambdaOptions(
        team=team or atf_settings.default_team,
        max_attempts=max_attempts or atf_settings.max_attempts,
        heartbeat_timeout_s=heartbeat_timeout or atf_settings.heartbeat_timeout_s,
        backoff_base_s=atf_settings.backoff_base_s if backoff_base is None else backoff_base,
        backoff_cap_s=backoff_cap or atf_settings.backoff_cap_s,
        quota_per_s=quota,
        timeout_s=_default_timeout_s() if timeout is None else (timeout or None),
    )
    if timeout is not None and not timeout >= 0:
        raise ValueError(f"lambda {name!r}: timeout must be a number of seconds (0: no limit)")

    def decorate(func: LambdaFunction) -> RegisteredLambda:
        registered = RegisteredLambda(name, func, options)
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
