"""The task context handed to a lambda, and the outcomes a lambda may raise."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from time import monotonic
from typing import Any, ParamSpec, Protocol, TypeVar

from django.utils import timezone

#: Seconds between two progress writes of one task, at least.
PROGRESS_INTERVAL_S = 1.0

_P = ParamSpec("_P")
_T = TypeVar("_T")


class Retry(Exception):  # noqa: N818 - an outcome, not an error
    """Raised by a lambda: try again, after `delay` seconds if given, else after the backoff."""

    def __init__(self, message: str = "retry requested", *, delay: float | None = None) -> None:
        super().__init__(message)
        self.delay = delay


class Fatal(Exception):  # noqa: N818 - an outcome, not an error
    """Raised by a lambda: the task failed for good; do not retry."""


class AttemptStopped(BaseException):  # noqa: N818 - named for what happened
    """Raised in a lambda's thread when its worker stopped the attempt (the subclasses say why).

    A BaseException, like KeyboardInterrupt, so that a lambda's `except Exception` does not
    swallow it; a lambda may catch it to clean up, but the attempt has already ended.
    """


class TimeLimitExceeded(AttemptStopped):
    """The attempt ran past its time limit: it has already ended `timeout`."""


class TaskCancelled(AttemptStopped):
    """A cancel stopped the running task: its attempt has already ended `cancelled`."""


class ShardUnreachable(AttemptStopped):
    """The worker could not renew the task's lease on its shard for too long (the shard is
    down or cut off): the attempt is stopped before the shard could give the task to another
    worker; nothing of it is recorded, and the task runs again once its shard is back."""


class LeaseLost(AttemptStopped):
    """This attempt no longer holds its task (another execution took it over): it may record
    nothing, and its result will be refused."""


class TaskLink(Protocol):
    """How a running task reads and writes what it keeps beside its result: the store itself
    (StoreLink), or a remote worker's transport."""

    def parent_results(self, task_id: int) -> list[Any]: ...

    def recorded_steps(self, task_id: int, lease: int) -> dict[str, Any]: ...

    def record_step(self, task_id: int, lease: int, name: str, value: Any,
                    size: int) -> str: ...

    def report_progress(self, task_id: int, done: float, total: float | None,
                        note: str) -> None: ...


class StoreLink:
    """A TaskLink to the store itself (a direct worker, the test helpers)."""

    def parent_results(self, task_id: int) -> list[Any]:
        from tasks_core.waited_results import local_parent_results  # the store, once asked

        return local_parent_results(task_id)

    def recorded_steps(self, task_id: int, lease: int) -> dict[str, Any]:
        from tasks_core.store.steps import recorded_steps

        return recorded_steps(task_id)

    def record_step(self, task_id: int, lease: int, name: str, value: Any, size: int) -> str:
        from tasks_core.store.steps import record_step

        return record_step(task_id, lease, name=name, value=value, size=size,
                           now=timezone.now())

    def report_progress(self, task_id: int, done: float, total: float | None,
                        note: str) -> None:
        from tasks_core.store.progress import report

        report(task_id, done=done, total=total, note=note, now=timezone.now())


STORE_LINK = StoreLink()


@dataclass(frozen=True, kw_only=True)
class TaskContext:
    """What a running lambda knows about its task."""

    task_id: int
    attempt: int
    collection: str
    priority: str
    lambda_name: str
    _heartbeat: Callable[[], bool] = field(repr=False, default=lambda: True)
    _cancelled: Callable[[], bool] = field(repr=False, default=lambda: False)
    #: The lease of this attempt, which its steps are recorded under.
    _lease: int = field(repr=False, default=0)
    #: Where parent results and steps are read and written; None: the store itself.
    _link: TaskLink | None = field(repr=False, default=None)
    #: The recorded steps, by name, once the first `step` read them.
    _steps: dict[str, Any] | None = field(repr=False, default=None)
    #: When this attempt last wrote its progress (monotonic()).
    _progress_at: float = field(repr=False, default=-PROGRESS_INTERVAL_S)

    def heartbeat(self) -> bool:
        """Renew this task's lease now; False if it was lost or a cancel asked to stop the task
        (either way its result will be refused: stop)."""
        return self._heartbeat()

    def parent_results(self) -> list[Any]:
        """The results of the tasks this one waited for, in order: its group's members when
        it is a group's `then` (or `on_failure`: None for those that did not succeed), else
        its `after` parents."""
        return (self._link or STORE_LINK).parent_results(self.task_id)

    def step(self, name: str, func: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """Run `func(*args, **kwargs)` as the step `name` and record its JSON result before
        returning it; if an earlier attempt of this task recorded the step, return that
        result without running `func` again. Raises LeaseLost when this attempt no longer
        holds the task (nothing was recorded: stop), and Fatal when the result is not JSON or
        would take the task's steps past ATF_MAX_RESULT_BYTES."""
        link = self._link or STORE_LINK
        if self._steps is None:
            object.__setattr__(self, "_steps", link.recorded_steps(self.task_id, self._lease))
        steps = self._steps
        assert steps is not None
        if name in steps:
            return steps[name]
        value = func(*args, **kwargs)
        try:
            size = len(json.dumps(value, allow_nan=False, separators=(",", ":")).encode())
        except (TypeError, ValueError, RecursionError) as exc:
            raise Fatal(f"step {name!r} returned a value that is not JSON: {exc}") from None
        outcome = link.record_step(self.task_id, self._lease, name, value, size)
        if outcome == "lease_lost":
            raise LeaseLost(f"step {name!r} not recorded: this attempt lost its task's lease")
        if outcome == "too_large":
            raise Fatal(f"step {name!r} ({size} bytes) would take the task's steps past "
                        "ATF_MAX_RESULT_BYTES")
        steps[name] = value
        return value

    def progress(self, done: float, total: float | None = None, note: str = "") -> bool:
        """Report how far the task got (`done` of `total`, and a short `note`), shown by the
        API and the console. Written at most once a second: a report within a second of the
        last one written is dropped (the next one after it is written). Whether this one
        was written."""
        now = monotonic()
        if now - self._progress_at < PROGRESS_INTERVAL_S:
            return False
        object.__setattr__(self, "_progress_at", now)
        (self._link or STORE_LINK).report_progress(self.task_id, float(done),
                                                   None if total is None else float(total),
                                                   str(note))
        return True

    @property
    def cancelled(self) -> bool:
        """Whether a cancel asked to stop this task (its worker heard at its last heartbeat)."""
        return self._cancelled()
