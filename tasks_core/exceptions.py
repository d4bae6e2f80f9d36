"""Errors raised by ATF. Each docstring is the default message."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied


class AtfError(Exception):
    """Something went wrong in ATF."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or self.__doc__)


class LambdaNotFound(AtfError):
    """No lambda is registered under that name."""


class DuplicateLambda(AtfError):
    """A lambda with that name is registered already."""


class InvalidLambdaDefinition(AtfError):
    """A lambda's definition (its name or options, in atf.register or @task) is not valid.

    Raised as the code that defines the lambda is imported: while the apps load, it ends a
    process in one line (tasks_core.apps)."""


class UnknownLambdaOption(InvalidLambdaDefinition, TypeError):
    """An option that no lambda takes."""


class InvalidLambdaOption(InvalidLambdaDefinition, ValueError):
    """A lambda option's value is not valid."""


class InvalidTask(AtfError):
    """The task is not valid.

    `errors` maps a field name to its messages, the way the API reports them.
    """

    def __init__(self, errors: dict[str, list[str]]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{field}: {' '.join(msgs)}" for field, msgs in errors.items()))


class InvalidShape(AtfError):
    """The JSON value does not have its declared shape."""

    def __init__(self, errors: list[str] | dict[Any, Any]) -> None:
        #: What the API answers of it (tasks_core.json_fields): a list of messages, or per
        #: field name (or list index) its own errors.
        self.errors = errors
        super().__init__()


class NotYourTeam(AtfError, PermissionDenied):
    """The lambda belongs to another team.

    Also Django's PermissionDenied, so every front end answers it as a refusal (403)."""


class InvalidOverride(InvalidTask):
    """An operator override is not valid."""


class InvalidTransition(AtfError):
    """That status change is not allowed."""


class StaleLease(AtfError):
    """The task's lease has moved on: another worker owns it now."""


class TaskNotFound(AtfError, LookupError):
    """No task has that id."""


class QueueUnavailable(AtfError):
    """The queue service cannot be reached."""


class ConfigurationError(AtfError):
    """ATF is configured in a way that cannot work."""


class LimitReached(AtfError):
    """A team or a caller holds as much of something as a setting allows."""


class WorkerNotFound(AtfError):
    """No running worker of the caller's teams has that id."""


class WorkerExists(AtfError):
    """A worker with that id is registered already."""
