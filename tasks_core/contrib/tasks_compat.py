"""Django's tasks framework, from wherever this project's Django has it.

Django 6.0 and later ship it as `django.tasks`; on Django 5.2 the `django-tasks` package (the
backport it was merged from) provides the same API as `django_tasks`. The backend and its
tests import these names from here, so one backend serves both: on Django 6.x it subclasses
Django's own `BaseTaskBackend` and hands back Django's own `Task`, `TaskResult` and
`TaskError`, sends Django's signals and raises Django's exceptions, and the backport is never
imported. The two differ only in where things live and in two exception names (the
backport's `InvalidTaskError` is Django's `InvalidTask`).

`task` is the framework's own decorator, except on Django 6.0, whose `task` passes no options
beyond Django's to the backend: there it is Django 6.1's, so that ATF's options work on every
supported Django when `task` is imported from here.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import django

from tasks_core import logs

#: True when the tasks framework is Django's own (`django.tasks`, Django 6.0 and later).
NATIVE = django.VERSION >= (6, 0)

# Type checkers read Django's own API (django-stubs types `django.tasks`): the backport's is
# the same API under other names.
if NATIVE or TYPE_CHECKING:
    from django.tasks import (
        DEFAULT_TASK_BACKEND_ALIAS,
        DEFAULT_TASK_QUEUE_NAME,
        Task,
        TaskContext,
        TaskResult,
        TaskResultStatus,
        default_task_backend,
        task,
        task_backends,
    )
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import (
        DEFAULT_TASK_PRIORITY,
        TASK_MAX_PRIORITY,
        TASK_MIN_PRIORITY,
        TaskError,
    )
    from django.tasks.exceptions import InvalidTask as InvalidTaskError
    from django.tasks.exceptions import (
        InvalidTaskBackend,
        TaskResultDoesNotExist,
        TaskResultMismatch,
    )
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json

else:
    from django_tasks import (  # the backport, on Django 5.2
        DEFAULT_TASK_BACKEND_ALIAS,
        DEFAULT_TASK_QUEUE_NAME,
        TaskContext,
        TaskResult,
        TaskResultStatus,
        default_task_backend,
        task,
        task_backends,
    )
    from django_tasks.backends.base import (
        BaseTaskBackend,
    )
    from django_tasks.base import (
        DEFAULT_TASK_PRIORITY,
        TASK_MAX_PRIORITY,
        TASK_MIN_PRIORITY,
        Task,
        TaskError,
    )
    from django_tasks.exceptions import (
        InvalidTaskBackendError as InvalidTaskBackend,
    )
    from django_tasks.exceptions import (
        InvalidTaskError,
        TaskResultDoesNotExist,
        TaskResultMismatch,
    )
    from django_tasks.signals import (
        task_enqueued,
        task_finished,
        task_started,
    )
    from django_tasks.utils import normalize_json

#: The logger Django's task signals log on (a failure at ERROR with its traceback).
LOGGER_NAME = logs.DJANGO_TASKS_LOGGER


def _task_with_options(function: Callable[..., Any] | None = None, *,
                       priority: int = DEFAULT_TASK_PRIORITY,
                       queue_name: str = DEFAULT_TASK_QUEUE_NAME,
                       backend: str = DEFAULT_TASK_BACKEND_ALIAS, takes_context: bool = False,
                       **options: Any) -> Any:
    """Django 6.1's `task` decorator, for Django 6.0, whose `task` takes no other options: the
    rest go to the backend's task class (ATF's options, tasks_core.contrib.task_options)."""

    def wrapper(func: Callable[..., Any]) -> Task:
        return task_backends[backend].task_class(
            func=func, priority=priority, queue_name=queue_name, backend=backend,
            takes_context=takes_context, run_after=None, **options)

    return wrapper(function) if function else wrapper


if "kwargs" not in inspect.signature(task).parameters:  # Django 6.0
    task = _task_with_options  # type: ignore[assignment]

__all__ = [
    "DEFAULT_TASK_BACKEND_ALIAS", "DEFAULT_TASK_PRIORITY", "DEFAULT_TASK_QUEUE_NAME",
    "LOGGER_NAME", "NATIVE",
    "TASK_MAX_PRIORITY", "TASK_MIN_PRIORITY", "BaseTaskBackend", "InvalidTaskBackend",
    "InvalidTaskError", "Task", "TaskContext", "TaskError", "TaskResult", "TaskResultDoesNotExist",
    "TaskResultMismatch", "TaskResultStatus", "default_task_backend", "normalize_json", "task",
    "task_backends", "task_enqueued", "task_finished", "task_started",
]
