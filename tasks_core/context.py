"""The task context handed to a lambda, and the outcomes a lambda may raise."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


def _store_parent_results(task_id: int) -> list[Any]:
    from tasks_core.groups import local_parent_results  # the store, only once asked

    return local_parent_results(task_id)


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
    #: Reads the results of the tasks this one waited for, by its id: the store itself, or
    #: a remote worker's transport (paged, tasks_core.groups.all_results).
    _parent_results: Callable[[int], list[Any]] = field(repr=False,
                                                        default=_store_parent_results)

    def heartbeat(self) -> bool:
        """Renew this task's lease now; False if it was lost or a cancel asked to stop the task
        (either way its result will be refused: stop)."""
        return self._heartbeat()

    def parent_results(self) -> list[Any]:
        """The results of the tasks this one waited for, in order: its group's members when
        it is a group's `then` (or `on_failure`: None for those that did not succeed), else
        its `after` parents."""
        return self._parent_results(self.task_id)

    @property
    def cancelled(self) -> bool:
        """Whether a cancel asked to stop this task (its worker heard at its last heartbeat)."""
        return self._cancelled()
