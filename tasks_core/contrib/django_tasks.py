"""A backend for the django-tasks package (the API that became `django.tasks` in Django 6.0).

    TASKS = {"default": {"BACKEND": "tasks_core.contrib.django_tasks.ATFBackend"}}

`@task` functions are enqueued as tasks of one ATF lambda, `django_tasks.run`, whose payload
names the function by its import path; ATF workers run them like any other task. run_after
maps to run_at, queue_name to the collection, and the result id is the ATF task id.

A worker runs only functions it knows as tasks: those enqueued from its own process, and
the `@task` objects of the `tasks` modules of installed apps and of the modules listed in
OPTIONS["MODULES"], imported once at its first task. A payload's import path is only looked up
in that registry, never imported, so no payload can make a worker import a module.

Priorities: django-tasks' -100..100 map onto ATF's priority names, which order tasks strictly
(high before default before low), first due first within a name. 0 is ATF_DEFAULT_PRIORITY;
1..100 are spread evenly over the names above it, -1..-100 over those below it (with the
default names: 1..100 -> high, -1..-100 -> low). Within a name, numeric order is not kept:
ATF keeps one queue per <lambda, priority name>, which gives strict priority between names at
no cost, whereas an order by number would need a sorted queue per name instead of a list.
Deployments that need finer steps add names to ATF_PRIORITIES.

Outcomes: an exception the function raises -- SystemExit, KeyboardInterrupt and other
BaseExceptions included -- fails the attempt with that exception's class and traceback.
`task_finished` is sent once per task, when it has finished for good: SUCCESSFUL with its
return value, or FAILED with all its attempts' errors; an attempt that will be retried sends
no signal. OPTIONS: {"MAX_ATTEMPTS": n} (default 1: an exception fails the task, as with
django-tasks' own backends; more gives ATF's retries with backoff).
"""

from __future__ import annotations

import builtins
import importlib
import logging
import re
import sys
import threading
import traceback
from dataclasses import replace
from datetime import datetime
from typing import Any, TypeVar

from django.apps import apps
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone
from django.utils.module_loading import autodiscover_modules
from django_tasks import TaskContext, task_backends
from django_tasks.backends.base import BaseTaskBackend
from django_tasks.base import TASK_MAX_PRIORITY, Task, TaskError, TaskResult, TaskResultStatus
from django_tasks.exceptions import InvalidTaskError, TaskResultDoesNotExist
from django_tasks.signals import task_enqueued, task_finished, task_started
from django_tasks.utils import normalize_json
from typing_extensions import ParamSpec

from tasks_core import atf, scheduling
from tasks_core.exceptions import InvalidTask
from tasks_core.models import TaskAttempt, TaskEntity
from tasks_core.states import TaskStatus

logger = logging.getLogger(__name__)

T = TypeVar("T")
P = ParamSpec("P")

#: The ATF lambda that runs django-tasks functions.
LAMBDA_NAME = "django_tasks.run"

#: What a django-tasks caller sees of each ATF status.
STATUSES: dict[TaskStatus, TaskResultStatus] = {
    TaskStatus.NEW: TaskResultStatus.READY,
    TaskStatus.WAITING: TaskResultStatus.READY,
    TaskStatus.ENQUEUED: TaskResultStatus.READY,
    TaskStatus.CLAIMED: TaskResultStatus.READY,
    TaskStatus.RETRYING: TaskResultStatus.READY,
    TaskStatus.PROCESSING: TaskResultStatus.RUNNING,
    TaskStatus.SUCCESS: TaskResultStatus.SUCCESSFUL,
    TaskStatus.FATAL_FAILURE: TaskResultStatus.FAILED,
    TaskStatus.DEAD: TaskResultStatus.FAILED,
    TaskStatus.CANCELLED: TaskResultStatus.FAILED,
    TaskStatus.DROPPED: TaskResultStatus.FAILED,
}


def priority_name(priority: int) -> str:
    """The ATF priority of a django-tasks priority: 0 is the default priority, higher numbers
    the names above it in ATF_PRIORITIES (split evenly over 1..100), lower ones those below."""
    names = list(settings.ATF_PRIORITIES)
    default = names.index(settings.ATF_DEFAULT_PRIORITY)
    if priority == 0:
        return names[default]
    side = names[:default][::-1] if priority > 0 else names[default + 1:]
    if not side:
        return names[default]
    band = (abs(priority) - 1) * len(side) // TASK_MAX_PRIORITY
    return side[min(band, len(side) - 1)]


def _class_path(error: dict[str, Any]) -> str:
    """The dotted path of the exception class an error record describes."""
    name = str(error.get("type") or "Exception")
    # The traceback's summary line names the class with its module (builtins excepted).
    pattern = rf"^((?:[\w.]+\.)?{re.escape(name)})(?::|$)"
    found = re.findall(pattern, error.get("traceback") or "", flags=re.MULTILINE)
    if found and "." in found[-1]:
        return found[-1]
    if isinstance(getattr(builtins, name, None), type):
        return f"builtins.{name}"
    return "tasks_core.exceptions.AtfError"  # ATF's own outcomes: WorkerLost, Cancelled, ...


_known_lock = threading.Lock()
_known: dict[str, Task] = {}  #: module_path -> the @task, for the tasks this process knows
_discovered = False


def remember(task: Task) -> None:
    """Know `task` by its module path (enqueue does it; so does discovery)."""
    with _known_lock:
        _known.setdefault(task.module_path, task)


_discovery_lock = threading.Lock()


def _discover() -> None:
    """Import the `tasks` modules of installed apps and the backends' OPTIONS["MODULES"] (from
    settings, never from a payload) once, and know every @task they hold."""
    global _discovered
    with _discovery_lock:
        if _discovered:
            return
        autodiscover_modules("tasks")
        names = [f"{config.name}.tasks" for config in apps.get_app_configs()]
        modules = [sys.modules[name] for name in names if name in sys.modules]
        for alias in settings.TASKS:
            backend = task_backends[alias]
            if isinstance(backend, ATFBackend):
                modules += [importlib.import_module(name) for name in backend.modules]
        for module in modules:
            for value in vars(module).values():
                if isinstance(value, Task):
                    remember(value)
        _discovered = True


def _task_of(payload: dict[str, Any]) -> Task:
    """The @task a payload names, with the options it was enqueued with.

    Raises InvalidTaskError for a path this process does not know as a task.
    """
    path = payload["task"]
    if not isinstance(path, str):
        raise InvalidTaskError(f"{path!r} is not a task's path")
    if path not in _known:
        _discover()
    task = _known.get(path)
    if task is None:
        raise InvalidTaskError(f"{path} is not a known django-tasks task (one this process "
                               "enqueued, or one of a tasks module or OPTIONS['MODULES'])")
    run_after = payload.get("run_after")
    return task.using(priority=payload["priority"], queue_name=payload["queue_name"],
                      run_after=datetime.fromisoformat(run_after) if run_after else None,
                      backend=payload["backend"])


class ATFBackend(BaseTaskBackend):
    """Runs django-tasks `@task` functions as ATF tasks of the lambda `django_tasks.run`."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict) -> None:
        super().__init__(alias, params)
        self.max_attempts = int(self.options.get("MAX_ATTEMPTS", 1))
        #: Modules whose @task functions a worker may run, besides apps' `tasks` modules.
        self.modules = [str(name) for name in self.options.get("MODULES", [])]

    def enqueue(self, task: Task[P, T], args: P.args,  # type: ignore[valid-type]
                kwargs: P.kwargs) -> TaskResult[T]:  # type: ignore[valid-type]
        """Schedule the task in ATF (inside the caller's transaction, if any): one INSERT."""
        self.validate_task(task)
        remember(task)
        payload = {
            "task": task.module_path,
            "args": normalize_json(args),
            "kwargs": normalize_json(kwargs),
            "priority": task.priority,
            "queue_name": task.queue_name,
            "run_after": task.run_after.isoformat() if task.run_after else None,
            "backend": self.alias,
        }
        try:
            entity, _created = scheduling.schedule(
                LAMBDA_NAME, payload, collection=task.queue_name,
                priority=priority_name(task.priority), run_at=task.run_after,
                max_attempts=self.max_attempts,
            )
        except InvalidTask as exc:  # e.g. arguments over ATF_MAX_PAYLOAD_BYTES
            raise InvalidTaskError(str(exc)) from exc
        result = self._result(entity, task, attempts=[])  # a new task has no attempts yet
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult:
        """The TaskResult of the ATF task `result_id`; TaskResultDoesNotExist if there is none."""
        try:
            pk = int(result_id)
        except (TypeError, ValueError):
            raise TaskResultDoesNotExist(result_id) from None
        entity = TaskEntity.objects.filter(pk=pk, lambda_ref__name=LAMBDA_NAME).first()
        if entity is None:
            raise TaskResultDoesNotExist(result_id)
        try:
            task = _task_of(entity.payload)
        except (KeyError, TypeError, InvalidTaskError) as exc:
            raise TaskResultDoesNotExist(f"{result_id}: {exc}") from exc
        return self._result(entity, task)

    def _result(self, entity: TaskEntity, task: Task,
                attempts: list[tuple[str, datetime, Any]] | None = None) -> TaskResult:
        status = TaskStatus(entity.status)
        if attempts is None:
            attempts = list(TaskAttempt.objects.filter(task_id=entity.pk).order_by("number")
                            .values_list("worker", "started_at", "error"))
        worker_ids = [worker for worker, _started, _error in attempts]
        starts: list[datetime | None] = [started for _worker, started, _error in attempts]
        errors = [error for _worker, _started, error in attempts if error]
        if status is TaskStatus.PROCESSING:  # the running attempt has no TaskAttempt row yet
            worker_ids.append(entity.worker)
            starts.append(entity.started_at)
        elif STATUSES[status] is TaskResultStatus.FAILED and not errors and entity.last_error:
            errors.append(entity.last_error)  # cancelled, dropped: no attempt to show
        result: TaskResult[Any] = TaskResult(
            task=task,
            id=str(entity.pk),
            status=STATUSES[status],
            enqueued_at=entity.created_at,
            started_at=starts[0] if starts else None,
            last_attempted_at=starts[-1] if starts else None,
            finished_at=entity.finished_at,
            args=entity.payload["args"],
            kwargs=entity.payload["kwargs"],
            backend=self.alias,
            errors=[TaskError(exception_class_path=_class_path(error),
                              traceback=error.get("traceback")
                              or f"{error.get('type')}: {error.get('message')}")
                    for error in errors],
            worker_ids=worker_ids,
        )
        if status is TaskStatus.SUCCESS:
            object.__setattr__(result, "_return_value", entity.result)
        return result


def _finished(result: TaskResult, status: TaskResultStatus, value: Any = None,
              errors: list[TaskError] | None = None) -> TaskResult:
    done = replace(result, status=status, finished_at=timezone.now(),
                   errors=result.errors if errors is None else errors)
    object.__setattr__(done, "_return_value", value)
    return done


def _error(exc: BaseException) -> TaskError:
    cls = type(exc)
    return TaskError(exception_class_path=f"{cls.__module__}.{cls.__qualname__}",
                     traceback="".join(traceback.format_exception(exc)))


@atf.register(LAMBDA_NAME, max_attempts=1)
def run(ctx: atf.TaskContext, payload: Any) -> Any:
    """Run the django-tasks function that `payload` names; return its JSON return value."""
    try:
        backend = task_backends[payload["backend"]]
        task = _task_of(payload)
    except (KeyError, TypeError, InvalidTaskError, ImproperlyConfigured) as exc:
        raise atf.Fatal(f"not a runnable django-tasks payload: {exc}") from exc
    if not isinstance(backend, ATFBackend):
        raise atf.Fatal(f"backend {payload['backend']!r} is not an ATFBackend")
    entity = TaskEntity.objects.get(pk=ctx.task_id)
    result = backend._result(entity, task)
    task_started.send(type(backend), task_result=result)
    try:
        if task.takes_context:
            value = task.call(TaskContext(task_result=result), *payload["args"],
                              **payload["kwargs"])
        else:
            value = task.call(*payload["args"], **payload["kwargs"])
        value = normalize_json(value)
    except BaseException as exc:
        # Only the last attempt's failure is the task's: a retried one sends nothing.
        if ctx.attempt >= entity.max_attempts:
            task_finished.send(type(backend), task_result=_finished(
                result, TaskResultStatus.FAILED, errors=[*result.errors, _error(exc)]))
        raise
    task_finished.send(type(backend),
                       task_result=_finished(result, TaskResultStatus.SUCCESSFUL, value))
    return value
