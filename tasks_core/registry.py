"""The lambda registry behind `atf.register`: name -> callable and options; no duplicates."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings

from tasks_core.exceptions import DuplicateLambda, LambdaNotFound

if TYPE_CHECKING:
    from tasks_core.context import TaskContext
    from tasks_core.models import TaskEntity

logger = logging.getLogger(__name__)

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
        self.__doc__ = func.__doc__
        self.__wrapped__ = func

    def __call__(self, ctx: TaskContext, payload: Any) -> Any:
        return self.func(ctx, payload)

    def schedule(self, payload: Any = None, **options: Any) -> TaskEntity:
        from tasks_core import scheduling

        task, _created = scheduling.schedule(self.name, payload, **options)
        return task

    def __repr__(self) -> str:
        return f"<lambda {self.name}>"


_lock = threading.Lock()
_lambdas: dict[str, RegisteredLambda] = {}


def _default_timeout_s() -> float | None:
    """ATF_TASK_TIMEOUT_S as seconds (from the environment it may come as text)."""
    value = settings.ATF_TASK_TIMEOUT_S
    return None if value in (None, "") else float(value)


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
    schedule: str | float | timedelta | None = None,
) -> Callable[[LambdaFunction], RegisteredLambda]:
    """Decorator: register `func(ctx, payload)` as the lambda `name` with these options.

    `timeout` is the seconds one attempt may run (default ATF_TASK_TIMEOUT_S; neither: no
    limit); an attempt past it ends with outcome `timeout` and is retried like a failure.
    `schedule` also runs it periodically with an empty payload: a cron expression such as
    "*/5 * * * *", or an interval in seconds (see `tasks_core.periodic`).
    """
    options = LambdaOptions(
        team=team or settings.ATF_DEFAULT_TEAM,
        max_attempts=max_attempts or settings.ATF_MAX_ATTEMPTS,
        heartbeat_timeout_s=heartbeat_timeout or settings.ATF_HEARTBEAT_TIMEOUT_S,
        backoff_base_s=settings.ATF_BACKOFF_BASE_S if backoff_base is None else backoff_base,
        backoff_cap_s=backoff_cap or settings.ATF_BACKOFF_CAP_S,
        quota_per_s=quota,
        timeout_s=_default_timeout_s() if timeout is None else timeout,
    )
    if options.timeout_s is not None and not options.timeout_s > 0:
        raise ValueError(f"lambda {name!r}: timeout must be a number of seconds above 0")

    def decorate(func: LambdaFunction) -> RegisteredLambda:
        registered = RegisteredLambda(name, func, options)
        with _lock:
            if name in _lambdas:
                raise DuplicateLambda(f"lambda {name!r} is registered already")
            if schedule is not None:
                from tasks_core import periodic

                periodic.every(schedule, name, name=name)
            _lambdas[name] = registered
        return registered

    return decorate


def unregister(name: str) -> None:
    """Forget a lambda and its code schedule (tests that register their own)."""
    from tasks_core import periodic

    with _lock:
        _lambdas.pop(name, None)
    periodic.forget(name)


def get(name: str) -> RegisteredLambda:
    try:
        return _lambdas[name]
    except KeyError:
        raise LambdaNotFound(f"unknown lambda {name!r}") from None


def names() -> list[str]:
    return sorted(_lambdas)


def sync_to_store() -> None:
    """Create or update a Lambda row per registered lambda; mark rows the code lost `in_code=False`.

    The row's option columns hold the code's values and nothing else: operators' overrides
    live in LambdaOverride rows and gates in their own columns, which this never writes.
    """
    from tasks_core import directory
    from tasks_core.models import Lambda, Team

    teams = {name: Team.objects.get_or_create(name=name)[0] for name in
             {lam.options.team for lam in _lambdas.values()}}
    for lam in _lambdas.values():
        Lambda.objects.update_or_create(
            name=lam.name,
            defaults={
                "team": teams[lam.options.team],
                "max_attempts": lam.options.max_attempts,
                "heartbeat_timeout_s": lam.options.heartbeat_timeout_s,
                "backoff_base_s": lam.options.backoff_base_s,
                "backoff_cap_s": lam.options.backoff_cap_s,
                "quota_per_s": lam.options.quota_per_s,
                "timeout_s": lam.options.timeout_s,
                "in_code": True,
            },
        )
    Lambda.objects.exclude(name__in=list(_lambdas)).update(in_code=False)
    directory.clear()
    logger.debug("synced %d lambdas to the store", len(_lambdas))
