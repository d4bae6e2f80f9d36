"""The ATF backend of Django's tasks framework: `django.tasks` on Django 6.0 and 6.1, the
django-tasks backport on Django 5.2 (both through `tasks_core.contrib.tasks_compat`).

    TASKS = {"default": {"BACKEND": "tasks_core.contrib.django_tasks.ATFBackend"}}

`@task` functions are enqueued as tasks of one ATF lambda, `django_tasks.run`, or of a lambda
of their own (`@task(lambda_name=...)`, see tasks_core.contrib.task_options); the payload names
the function by its import path, and ATF workers run them like any other task. run_after maps
to run_at, queue_name to the collection, and the result id is the ATF task id.

A worker runs only functions it knows as tasks: those enqueued from its own process, and
the `@task` objects of the `tasks` modules of installed apps and of the modules listed in
OPTIONS["MODULES"], imported once when the app is ready. A payload's import path is only looked
up in that registry, never imported, so no payload can make a worker import a module.

Priorities: Django's -100..100 map onto ATF's priority names, which order tasks strictly
(high before default before low), first due first within a name. 0 is ATF_DEFAULT_PRIORITY;
1..100 are spread evenly over the names above it, -1..-100 over those below it (with the
default names: 1..100 -> high, -1..-100 -> low). Within a name, numeric order is not kept:
ATF keeps one queue per <lambda, priority name>. `ATF_PRIORITIES = DJANGO_PRIORITIES` gives
each of Django's priorities a name of its own, and so its exact order (docs/lambdas.md
measures what that costs).

Outcomes: an exception the function raises -- SystemExit, KeyboardInterrupt and other
BaseExceptions included -- fails the attempt with that exception's class and traceback.
`task_finished` is sent once per task, when it has finished for good: SUCCESSFUL with its
return value, or FAILED with all its attempts' errors, from inside the exception handler so
that Django's receiver logs the failure once with its traceback; an attempt that will be
retried sends no signal. OPTIONS: {"MAX_ATTEMPTS": n} (default 1: an exception fails the task,
as with Django's own backends; more gives ATF's retries with backoff), which a task's own
`max_attempts` overrides.
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
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone
from django.utils.module_loading import autodiscover_modules

from tasks_core import atf, attempt_history, registry, scheduling
from tasks_core.conf import atf_settings
from tasks_core.contrib.task_options import ATFTask
from tasks_core.contrib.task_options import check as check_options
from tasks_core.contrib.tasks_compat import (
    LOGGER_NAME,
    TASK_MAX_PRIORITY,
    BaseTaskBackend,
    InvalidTaskError,
    Task,
    TaskContext,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    normalize_json,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)
from tasks_core.exceptions import InvalidTask
from tasks_core.models import TaskEntity
from tasks_core.states import TaskStatus

logger = logging.getLogger(__name__)

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


#: ATF_PRIORITIES that keep Django's numeric order exactly: one name per priority, 100 down to
#: -100, named `high` (100), `p99`..`p1`, `default` (0), `n1`..`n99`, `low` (-100), so the
#: usual names stay valid for atf.schedule(). docs/lambdas.md measures what the names cost.
DJANGO_PRIORITIES = ["high", *(f"p{n}" for n in range(TASK_MAX_PRIORITY - 1, 0, -1)),
                     "default", *(f"n{n}" for n in range(1, TASK_MAX_PRIORITY)), "low"]


def priority_name(priority: int) -> str:
    """The ATF priority of a Django task priority: 0 is the default priority, higher numbers
    the names above it in ATF_PRIORITIES (split evenly over 1..100), lower ones those below."""
    names = list(atf_settings.priorities)
    default = names.index(atf_settings.default_priority)
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
    """Know `task` by its module path (enqueue does it; so does discovery), and register the
    lambda of its own that it names, if any. An enqueue's idempotency key is not the task's."""
    if isinstance(task, ATFTask) and task.idempotency_key is not None:
        task = replace(task, idempotency_key=None)
    with _known_lock:
        known = _known.setdefault(task.module_path, task)
    if isinstance(known, ATFTask) and known.lambda_name:
        _register_own_lambda(known)


def forget(task: Task) -> None:
    """Know `task` no more, nor the lambda of its own (tests that define their own)."""
    with _known_lock:
        _known.pop(task.module_path, None)
    with _own_lock:
        for name, path in list(_own_lambdas.items()):
            if path == task.module_path:
                del _own_lambdas[name]
                registry.unregister(name)


_discovery_lock = threading.Lock()


def discover() -> None:
    """Import the `tasks` modules of installed apps and the backends' OPTIONS["MODULES"] (from
    settings, never from a payload) once, and know every @task they hold.

    tasks_core's ready() calls it in every process of a project whose TASKS use this backend,
    so the lambdas of `@task(lambda_name=...)` functions are registered (and synced) there.
    """
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
        discover()
    task = _known.get(path)
    if task is None:
        raise InvalidTaskError(f"{path} is not a known Django task (one this process "
                               "enqueued, or one of a tasks module or OPTIONS['MODULES'])")
    run_after = payload.get("run_after")
    return task.using(priority=payload["priority"], queue_name=payload["queue_name"],
                      run_after=datetime.fromisoformat(run_after) if run_after else None,
                      backend=payload["backend"])


def lambda_of(task: Task) -> str:
    """The ATF lambda a task runs as: its own, or the shared `django_tasks.run`."""
    return getattr(task, "lambda_name", None) or LAMBDA_NAME


_own_lock = threading.Lock()
_own_lambdas: dict[str, str] = {}  #: lambda name -> the module path of the task it runs


def _register_own_lambda(task: ATFTask) -> None:
    """Register the ATF lambda `task.lambda_name`, which runs only `task` (once a process)."""
    name = str(task.lambda_name)
    with _own_lock:
        if _own_lambdas.get(name) == task.module_path:
            return
        if name in _own_lambdas or name in registry.names():
            raise ImproperlyConfigured(f"{task.module_path}: lambda_name {name!r} is taken by "
                                       f"{_own_lambdas.get(name, 'another lambda')}")
        registered = atf.register(name, **task.lambda_options())(_OwnLambda(task.module_path))
        registered.reports_failures = True
        _own_lambdas[name] = task.module_path


class _OwnLambda:
    """The function of a `@task` function's own lambda: runs that task's payloads only."""

    def __init__(self, module_path: str) -> None:
        self.module_path = module_path
        self.__doc__ = f"Runs the Django task {module_path}."

    def __call__(self, ctx: atf.TaskContext, payload: Any) -> Any:
        if not isinstance(payload, dict) or payload.get("task") != self.module_path:
            raise atf.Fatal(f"this lambda runs only {self.module_path}")
        return run(ctx, payload)


def _bridge_lambdas() -> list[str]:
    with _own_lock:
        return [LAMBDA_NAME, *_own_lambdas]


class ATFBackend(BaseTaskBackend):
    """Runs `@task` functions as ATF tasks: of the lambda `django_tasks.run`, or of a lambda of
    their own (`@task(lambda_name=...)`)."""

    task_class = ATFTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict) -> None:
        super().__init__(alias, params)
        self.max_attempts = int(self.options.get("MAX_ATTEMPTS", 1))
        #: Modules whose @task functions a worker may run, besides apps' `tasks` modules.
        self.modules = [str(name) for name in self.options.get("MODULES", [])]

    def validate_task(self, task: Task) -> None:
        super().validate_task(task)
        if isinstance(task, ATFTask):
            check_options(task)

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
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
        options: dict[str, Any] = {
            "collection": getattr(task, "collection", None) or task.queue_name,
            "priority": priority_name(task.priority), "run_at": task.run_after,
            "max_attempts": self.max_attempts,
        }
        if isinstance(task, ATFTask):
            options.update((key, value) for key, value in task.per_task_options().items()
                           if value is not None)
            if task.idempotency_key is not None:
                options["idempotency_key"] = task.idempotency_key
        try:
            entity, created = scheduling.schedule(
                scheduling.TaskRequest(lambda_of(task), payload, **options))
        except InvalidTask as exc:  # e.g. arguments over ATF_MAX_PAYLOAD_BYTES
            raise InvalidTaskError(str(exc)) from exc
        if not created:  # the idempotency key named a task there was already
            return self._result(entity, task)
        result = self._result(entity, task, attempts=[])  # a new task has no attempts yet
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult:
        """The TaskResult of the ATF task `result_id`; TaskResultDoesNotExist if there is none."""
        try:
            pk = int(result_id)
        except (TypeError, ValueError):
            raise TaskResultDoesNotExist(result_id) from None
        entity = TaskEntity.objects.filter(pk=pk).select_related("lambda_ref").first()
        if entity is not None and entity.lambda_ref.name not in _bridge_lambdas():
            discover()  # a task's own lambda this process has not met yet
        if entity is None or entity.lambda_ref.name not in _bridge_lambdas():
            raise TaskResultDoesNotExist(result_id)
        try:
            task = _task_of(entity.payload)
        except (KeyError, TypeError, InvalidTaskError) as exc:
            raise TaskResultDoesNotExist(f"{result_id}: {exc}") from exc
        return self._result(entity, task)

    def _result(self, entity: TaskEntity, task: Task,
                attempts: list[tuple[str, datetime, Any]] | None = None) -> TaskResult:
        """The TaskResult of a task: `worker_ids` has one entry per attempt, the running one
        included, so `attempts` counts them."""
        status = TaskStatus(entity.status)
        if attempts is None:
            attempts = [(attempt.worker, attempt.started_at, attempt.error)
                        for attempt in attempt_history.everything(entity)]
        worker_ids = [worker for worker, _started, _error in attempts]
        starts: list[datetime | None] = [started for _worker, started, _error in attempts]
        errors = [error for _worker, _started, error in attempts if error]
        if status is TaskStatus.PROCESSING:  # the running attempt has no TaskAttempt row yet
            worker_ids.append(entity.worker)
            starts.append(entity.started_at)
        elif STATUSES[status] is TaskResultStatus.FAILED and not errors and entity.last_error:
            errors.append(entity.last_error)  # cancelled, dropped: no attempt to show
        result: TaskResult = TaskResult(
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


def _refused(ctx: atf.TaskContext, message: str) -> atf.Fatal:
    """The failure of a payload that names no task to run, logged where a task's would be."""
    logging.getLogger(LOGGER_NAME).error("Task id=%s refused: %s", ctx.task_id, message)
    return atf.Fatal(message)


@atf.register(LAMBDA_NAME, max_attempts=1)
def run(ctx: atf.TaskContext, payload: Any) -> Any:
    """Run the Django task that `payload` names; return its JSON return value.

    A failure that ends the task sends `task_finished` (FAILED) from inside the exception
    handler, so Django's own receiver logs it once, at ERROR with its traceback, on Django's
    tasks logger; the worker then logs only a line without the traceback (`reports_failures`).
    """
    try:
        backend = task_backends[payload["backend"]]
        task = _task_of(payload)
    except (KeyError, TypeError, InvalidTaskError, ImproperlyConfigured) as exc:
        raise _refused(ctx, f"not a runnable Django task payload: {exc}") from exc
    if not isinstance(backend, ATFBackend):
        raise _refused(ctx, f"backend {payload['backend']!r} is not an ATFBackend")
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


run.reports_failures = True
