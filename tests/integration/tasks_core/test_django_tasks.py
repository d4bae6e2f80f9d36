"""The django-tasks backend: `@task` functions enqueued through ATF, run by the executor, and
their results read back, following the behaviour django-tasks' own backend tests check.

Tasks run as a worker runs them: the store enqueues, claims and starts them, and
`workers.executor.run_lambda` calls the lambda and turns what happened into the result.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import django
import psycopg
import pytest
import redis
from asgiref.sync import async_to_sync
from django.conf import settings as django_settings
from django.db import transaction
from django.utils import timezone

from tasks_core import atf, store
from tasks_core.context import TaskContext as AtfContext
from tasks_core.contrib import django_tasks as backend_module
from tasks_core.contrib.django_tasks import ATFBackend, priority_name
from tasks_core.contrib.tasks_compat import (
    LOGGER_NAME,
    NATIVE,
    InvalidTaskError,
    TaskContext,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultMismatch,
    TaskResultStatus,
    default_task_backend,
    task,
    task_backends,
    task_finished,
)
from tasks_core.gating import Decision
from tasks_core.models import Lambda, TaskEntity
from tasks_core.states import TaskStatus
from tests.conftest import Processes, subprocess_env, wait_for
from workers.executor import run_lambda
from workers.results import Tally, log_outcome

pytestmark = [pytest.mark.django_db]

BACKEND = "tasks_core.contrib.django_tasks.ATFBackend"


class TaskBroke(Exception):
    """A failure of our own, to check the exception's class path comes back."""


@task()
def noop_task(*args: Any, **kwargs: Any) -> None:
    return None


@task()
async def noop_task_async(*args: Any, **kwargs: Any) -> None:
    return None


@task()
async def add_async(a: int, b: int = 0) -> dict[str, int]:
    return {"sum": a + b}


@task()
def calculate_meaning_of_life() -> int:
    return 42


@task()
def add(a: int, b: int = 0) -> dict[str, int]:
    return {"sum": a + b}


@task()
def failing_task_value_error() -> None:
    raise ValueError("This task failed due to ValueError")


@task()
def failing_task_own_error() -> None:
    raise TaskBroke("our own failure")


@task()
def failing_task_system_exit() -> None:
    raise SystemExit("This task failed due to SystemExit")


@task()
def failing_task_keyboard_interrupt() -> None:
    raise KeyboardInterrupt("This task failed due to KeyboardInterrupt")


@task()
def returns_a_set() -> object:
    return {1, 2}


@task(takes_context=True)
def get_task_id(context: TaskContext) -> dict[str, Any]:
    return {"id": context.task_result.id, "attempt": context.attempt}


#: A worker started with this variable set records each task_finished signal in that Redis list.
SIGNALS_KEY = "ATF_TEST_SIGNALS_KEY"


def _record_finished(sender: type, task_result: TaskResult, **kwargs: Any) -> None:
    if key := os.environ.get(SIGNALS_KEY):
        line = {"id": task_result.id, "status": str(task_result.status),
                "errors": [error.exception_class_path for error in task_result.errors]}
        redis.Redis.from_url(django_settings.REDIS_URL).rpush(key, json.dumps(line))


task_finished.connect(_record_finished, dispatch_uid="tests.record_finished")


@pytest.fixture
def finished_signals() -> Iterator[list[tuple[str, str, list[str]]]]:
    """The task_finished signals sent in this process: (id, status, error class paths)."""
    sent: list[tuple[str, str, list[str]]] = []

    def receive(sender: type, task_result: TaskResult, **kwargs: Any) -> None:
        sent.append((task_result.id, str(task_result.status),
                     [error.exception_class_path for error in task_result.errors]))

    task_finished.connect(receive, dispatch_uid="tests.finished_signals")
    yield sent
    task_finished.disconnect(dispatch_uid="tests.finished_signals")


@pytest.fixture(autouse=True)
def atf_backend(settings: Any) -> None:
    settings.TASKS = {"default": {"BACKEND": BACKEND, "QUEUES": ["default", "reports"]}}


def run_due(*, now: datetime | None = None, worker: str = "w1",
            lambda_name: str = backend_module.LAMBDA_NAME) -> list[str]:
    """Run every due task of the lambda once, as a worker would; return the statuses reached."""
    now = now or timezone.now() + timedelta(seconds=1)
    lam = Lambda.objects.get(name=lambda_name)
    batch = store.enqueue_due(lam.pk, limit=100, now=now, skip_collections=[],
                              decide=lambda collection: Decision.ENQUEUE)
    messages = [message for _priority, message in batch.messages]
    reached = []
    for claimed in store.claim(messages, worker=worker, lambda_ids=[lam.pk], now=now):
        assert store.start(claimed, now=now)
        ctx = AtfContext(task_id=claimed.task_id, attempt=claimed.attempt,
                         collection=claimed.collection, priority=claimed.priority,
                         lambda_name=claimed.lambda_name)
        result = run_lambda(claimed, ctx, worker=worker)
        status = store.finish(claimed, result, now=max(now, timezone.now()))
        log_outcome(claimed, result, status, Tally())
        reached.append(str(status))
    return reached


# --- the backend -------------------------------------------------------------------------


@pytest.mark.parametrize("path", [BACKEND, "tasks_core.backend.ATFBackend"])
def test_using_the_atf_backend(settings: Any, path: str) -> None:
    settings.TASKS = {"default": {"BACKEND": path}}
    backend = task_backends["default"]
    assert isinstance(backend, ATFBackend)
    assert backend.supports_defer and backend.supports_get_result
    assert backend.supports_priority and backend.supports_async_task


@pytest.mark.parametrize("func", [noop_task, noop_task_async])
def test_enqueue_creates_an_atf_task(func: Any) -> None:
    # When a @task function is enqueued
    result = func.enqueue(1, two=3)
    # Then the result is ready, not finished, with its arguments
    assert result.status == TaskResultStatus.READY
    assert not result.is_finished
    assert (result.started_at, result.last_attempted_at, result.finished_at) == (None,) * 3
    with pytest.raises(ValueError, match="Task has not finished yet"):
        result.return_value  # noqa: B018
    assert result.task == func
    assert (result.args, result.kwargs, result.attempts) == ([1], {"two": 3}, 0)
    # And it is an ordinary ATF task of the django_tasks.run lambda
    entity = TaskEntity.objects.get(pk=int(result.id))
    assert entity.lambda_ref.name == "django_tasks.run"
    assert (entity.status, entity.collection, entity.priority) == ("new", "default", "default")
    assert entity.payload["task"] == func.module_path


def test_aenqueue_and_aget_result() -> None:
    result = async_to_sync(noop_task.aenqueue)()
    assert result.status == TaskResultStatus.READY
    assert async_to_sync(default_task_backend.aget_result)(result.id) == result


def test_get_result_equals_the_enqueued_result() -> None:
    result = default_task_backend.enqueue(noop_task, [], {})
    assert default_task_backend.get_result(result.id) == result


@pytest.mark.parametrize("result_id", ["123456789", "not-a-number", ""])
def test_a_missing_result_does_not_exist(result_id: str) -> None:
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(result_id)


def test_an_atf_task_of_another_lambda_is_not_a_result() -> None:
    other = atf.schedule("demo.noop")
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(str(other.pk))


def test_get_result_of_another_task_function_is_a_mismatch() -> None:
    result = noop_task.enqueue()
    with pytest.raises(TaskResultMismatch):
        calculate_meaning_of_life.get_result(result.id)


def test_results_signals_and_exceptions_are_the_frameworks_own() -> None:
    # Given the tasks framework of this Django: its own on 6.x, the backport's on 5.2
    framework = "django.tasks" if django.VERSION >= (6, 0) else "django_tasks"
    base = importlib.import_module(f"{framework}.base")
    signals = importlib.import_module(f"{framework}.signals")
    exceptions = importlib.import_module(f"{framework}.exceptions")
    enqueued: list[str] = []

    def receive(sender: type, task_result: Any, **kwargs: Any) -> None:
        enqueued.append(task_result.id)

    signals.task_enqueued.connect(receive, dispatch_uid="tests.framework_enqueued")
    try:
        # When a task is enqueued
        result = add.enqueue(1)
    finally:
        signals.task_enqueued.disconnect(dispatch_uid="tests.framework_enqueued")
    # Then the task, its result and the backend are that framework's, and so are the signals
    assert isinstance(add, base.Task) and isinstance(result, base.TaskResult)
    backend_base = importlib.import_module(f"{framework}.backends.base")
    assert isinstance(task_backends["default"], backend_base.BaseTaskBackend)
    assert enqueued == [result.id]
    # ...and its exceptions
    with pytest.raises(exceptions.TaskResultDoesNotExist):
        default_task_backend.get_result("123456789")
    with pytest.raises(exceptions.InvalidTask if NATIVE else exceptions.InvalidTaskError):
        add.using(priority=101)
    # On Django 6 the backport is never imported, even where it is installed
    assert NATIVE is ("django_tasks" not in sys.modules)


# --- ATF's options on @task --------------------------------------------------------------


@task(max_attempts=3, timeout=30, collection="receipts")
def with_options(n: int) -> int:
    return n


@task(lambda_name="tests.own_lambda_task", backoff_base=0, quota=50, max_attempts=2)
def in_its_own_lambda(n: int) -> int:
    if n < 0:
        raise ValueError("negative")
    return n * 2


def test_task_options_become_the_atf_tasks_options() -> None:
    result = with_options.enqueue(1)
    entity = TaskEntity.objects.get(pk=int(result.id))
    assert (entity.lambda_ref.name, entity.max_attempts, entity.collection) == (
        "django_tasks.run", 3, "receipts")
    assert entity.timeout_s == 30


def test_an_unknown_task_option_is_refused_with_the_known_ones() -> None:
    with pytest.raises(TypeError, match=r"unknown option\(s\) max_atempts; .*max_attempts"):
        task(max_atempts=3)(noop_task.func)


@pytest.mark.parametrize(("options", "message"), [
    ({"backoff_cap": 60}, "backoff_cap needs the task to run as a lambda of its own"),
    ({"team": "a", "quota": 3}, "team, quota need the task to run as a lambda of its own"),
    ({"max_attempts": 0}, "max_attempts must be a whole number of at least 1"),
    ({"timeout": -1}, "timeout must be a number of seconds, 0 or more"),
])
def test_bad_task_options_are_invalid(options: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidTaskError, match=message):
        task(**options)(noop_task.func)


def test_an_idempotency_key_given_at_enqueue_returns_the_first_task(
        finished_signals: list) -> None:
    first = add.using(idempotency_key="order-7").enqueue(1)
    again = add.using(idempotency_key="order-7").enqueue(1)
    assert again.id == first.id
    assert TaskEntity.objects.get(pk=int(first.id)).idempotency_key == "order-7"
    assert TaskEntity.objects.count() == 1
    # The key belongs to that enqueue, not to the task: the result's task enqueues anew
    assert default_task_backend.get_result(first.id).task.enqueue(1).id != first.id


@pytest.fixture
def own_lambda() -> Iterator[str]:
    """The lambda of `in_its_own_lambda`, forgotten again afterwards (other tests count the
    registered lambdas)."""
    yield "tests.own_lambda_task"
    backend_module.forget(in_its_own_lambda)


def test_a_task_with_a_lambda_name_runs_as_a_lambda_of_its_own(own_lambda: str) -> None:
    # Given a @task function with a lambda of its own, enqueued twice
    good, bad = in_its_own_lambda.enqueue(21), in_its_own_lambda.enqueue(-1)
    # Then its tasks belong to that lambda, which has the task's lambda options
    lam = Lambda.objects.get(name=own_lambda)
    assert (lam.quota_per_s, lam.max_attempts, lam.backoff_base_s) == (50, 2, 0)
    assert set(TaskEntity.objects.values_list("lambda_ref__name", flat=True)) == {lam.name}
    # When a worker runs that lambda's due tasks (twice: the failing one has two attempts)
    assert sorted(run_due(lambda_name=lam.name)) == ["retrying", "success"]
    assert run_due(lambda_name=lam.name, now=timezone.now() + timedelta(hours=1)) == ["dead"]
    # Then the results come back through the backend, one worker id per attempt
    good.refresh()
    bad.refresh()
    assert (good.status, good.return_value) == (TaskResultStatus.SUCCESSFUL, 42)
    assert (bad.status, bad.attempts, bad.worker_ids) == (TaskResultStatus.FAILED, 2,
                                                          ["w1", "w1"])


def test_a_task_failure_is_logged_once_with_its_traceback_on_djangos_logger(
        caplog: pytest.LogCaptureFixture) -> None:
    # Given a task that raises
    result = failing_task_own_error.enqueue()
    # When a worker runs it
    with caplog.at_level(logging.DEBUG), caplog.at_level(logging.DEBUG, logger="workers"):
        assert run_due() == ["dead"]
    # Then one record has its traceback, at ERROR on the logger Django's tasks framework uses
    with_traceback = [record for record in caplog.records
                      if record.exc_info or "Traceback (most recent call last)" in
                      record.getMessage()]
    assert [(record.name, record.levelname) for record in with_traceback] == [
        (LOGGER_NAME, "ERROR")]
    assert with_traceback[0].exc_info[0] is TaskBroke
    assert result.id in with_traceback[0].getMessage()
    # ...and ATF's worker logs the outcome in a line without it, below ERROR
    assert [record.levelname for record in caplog.records
            if record.name == "workers.results"] == ["INFO"]


# --- priority, run_after, queue_name -----------------------------------------------------


@pytest.mark.parametrize(("priority", "expected"), [
    (-100, "low"), (-1, "low"), (0, "default"), (1, "high"), (100, "high"),
])
def test_priorities_map_to_atf_names(priority: int, expected: str) -> None:
    assert priority_name(priority) == expected


@pytest.mark.parametrize(("priority", "expected"), [
    (100, "urgent"), (51, "urgent"), (50, "high"), (1, "high"), (0, "default"), (-100, "low"),
])
def test_priorities_spread_over_more_names(settings: Any, priority: int, expected: str) -> None:
    settings.ATF_PRIORITIES = ["urgent", "high", "default", "low"]
    assert priority_name(priority) == expected


def test_django_priorities_give_every_priority_a_name_in_order(settings: Any) -> None:
    settings.ATF_PRIORITIES = backend_module.DJANGO_PRIORITIES
    names = [priority_name(priority) for priority in range(100, -101, -1)]
    assert names == backend_module.DJANGO_PRIORITIES
    assert (priority_name(100), priority_name(0), priority_name(-100)) == ("high", "default",
                                                                          "low")


def test_with_django_priorities_higher_numbers_run_first_then_the_earliest_due(
        settings: Any) -> None:
    # Given a name per Django priority, and tasks enqueued in no particular order
    settings.ATF_PRIORITIES = backend_module.DJANGO_PRIORITIES
    now = timezone.now()
    enqueued = [(priority, noop_task.using(priority=priority,
                                           run_after=now - timedelta(minutes=minutes)).enqueue())
                for priority, minutes in [(2, 1), (10, 1), (100, 1), (50, 1), (-5, 1), (0, 1),
                                          (10, 5), (-100, 1)]]
    # When the consumer takes them
    lam = Lambda.objects.get(name=backend_module.LAMBDA_NAME)
    batch = store.enqueue_due(lam.pk, limit=100, now=now, skip_collections=[],
                              decide=lambda collection: Decision.ENQUEUE)
    # Then they are pushed highest number first and, within a number, the earliest due first
    order = {int(result.id): (priority, result) for priority, result in enqueued}
    pushed = [order[message.task_id][0] for _name, message in batch.messages]
    assert pushed == [100, 50, 10, 10, 2, 0, -5, -100]
    tens = [order[message.task_id][1] for _name, message in batch.messages][2:4]
    assert tens[0].task.run_after < tens[1].task.run_after


def test_enqueue_with_priority() -> None:
    result = noop_task.using(priority=10).enqueue()
    assert TaskEntity.objects.get(pk=int(result.id)).priority == "high"
    assert result.task.priority == 10
    assert default_task_backend.get_result(result.id).task.priority == 10


def test_invalid_priority_is_refused() -> None:
    with pytest.raises(InvalidTaskError):
        noop_task.using(priority=101)


def test_run_after_becomes_run_at_and_holds_the_task_back() -> None:
    # Given a task that may run only in an hour
    run_after = timezone.now() + timedelta(hours=1)
    result = noop_task.using(run_after=run_after).enqueue()
    assert TaskEntity.objects.get(pk=int(result.id)).run_at == run_after
    assert default_task_backend.get_result(result.id).task.run_after == run_after
    # When workers look now, Then it does not run; in an hour, it does
    assert run_due() == []
    assert run_due(now=run_after + timedelta(seconds=1)) == ["success"]


def test_queue_name_is_the_collection() -> None:
    result = add.using(queue_name="reports").enqueue(1, b=2)
    assert TaskEntity.objects.get(pk=int(result.id)).collection == "reports"
    assert default_task_backend.get_result(result.id).task.queue_name == "reports"


def test_an_unknown_queue_is_refused() -> None:
    with pytest.raises(InvalidTaskError, match="Queue 'elsewhere' is not valid"):
        noop_task.using(queue_name="elsewhere").enqueue()


def test_arguments_over_the_payload_limit_are_refused(settings: Any) -> None:
    settings.ATF_MAX_PAYLOAD_BYTES = 1000
    with pytest.raises(InvalidTaskError, match="the limit is 1000"):
        noop_task.enqueue("x" * 2000)
    assert not TaskEntity.objects.exists()


def test_enqueue_rolls_back_with_the_callers_transaction() -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        noop_task.enqueue()
        raise RuntimeError("the caller's work failed")
    assert not TaskEntity.objects.exists()


# --- results and exceptions --------------------------------------------------------------


def test_a_result_comes_back_with_its_return_value() -> None:
    # Given an enqueued task
    result = calculate_meaning_of_life.enqueue()
    # When a worker runs it and the caller refreshes the result
    assert run_due() == ["success"]
    assert result.status == TaskResultStatus.READY
    result.refresh()
    # Then it succeeded with its return value, once, on that worker
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.is_finished
    assert result.return_value == 42
    assert (result.attempts, result.worker_ids) == (1, ["w1"])
    assert result.enqueued_at <= result.started_at <= result.finished_at
    assert result.last_attempted_at == result.started_at


@pytest.mark.parametrize("func", [add, add_async])
def test_arguments_reach_the_function(func: Any) -> None:
    result = func.enqueue(2, b=40)
    run_due()
    result.refresh()
    assert result.return_value == {"sum": 42}


@pytest.mark.parametrize(("func", "exception", "message"), [
    (failing_task_value_error, ValueError, "This task failed due to ValueError"),
    (failing_task_own_error, TaskBroke, "our own failure"),
])
def test_an_exception_fails_the_task_with_its_class_and_traceback(
        func: Any, exception: type[BaseException], message: str) -> None:
    # Given an enqueued task that raises
    result = func.enqueue()
    # When a worker runs it
    assert run_due() == ["dead"]  # one attempt by default: dead-letter queue, FAILED
    result.refresh()
    # Then it failed, with the exception's class and traceback
    assert result.status == TaskResultStatus.FAILED
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value  # noqa: B018
    assert result.is_finished
    assert result.errors[0].exception_class is exception
    assert result.errors[0].traceback.endswith(f"{exception.__name__}: {message}\n")
    assert result.attempts == 1


@pytest.mark.parametrize(("func", "exception"), [
    (failing_task_system_exit, SystemExit),
    (failing_task_keyboard_interrupt, KeyboardInterrupt),
])
def test_a_base_exception_fails_the_task_with_its_own_class(
        func: Any, exception: type[BaseException]) -> None:
    result = func.enqueue()
    assert run_due() == ["dead"]
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class is exception
    assert result.errors[0].traceback.endswith(
        f"{exception.__name__}: This task failed due to {exception.__name__}\n")


def test_a_payload_naming_a_module_imports_nothing() -> None:
    # Given a task of the bridge's lambda whose payload names a module that exits on import
    module = "tests.integration.tasks_core.django_tasks_exits_on_import"
    payload = {"task": f"{module}.job", "args": [], "kwargs": {}, "priority": 0,
               "queue_name": "default", "run_after": None, "backend": "default"}
    bad = atf.schedule(backend_module.LAMBDA_NAME, payload)
    # When a worker runs it, Then it fails for good and the module was never imported
    assert run_due() == ["fatal_failure"]
    assert module not in sys.modules
    assert "not a known Django task" in TaskEntity.objects.get(pk=bad.pk).last_error[
        "message"]


def test_task_finished_is_sent_once_per_final_outcome_with_its_errors(
        settings: Any, finished_signals: list) -> None:
    # Given a backend that gives tasks two attempts, a task that fails and one that succeeds
    settings.TASKS = {"default": {"BACKEND": BACKEND, "OPTIONS": {"MAX_ATTEMPTS": 2}}}
    failing = failing_task_value_error.enqueue()
    good = calculate_meaning_of_life.enqueue()
    # When the failing one's first attempt fails, Then only the success is signalled
    assert sorted(run_due()) == ["retrying", "success"]
    assert finished_signals == [(good.id, "SUCCESSFUL", [])]
    # When its second attempt fails too, Then FAILED is sent once, with both attempts' errors
    assert run_due(now=timezone.now() + timedelta(hours=1)) == ["dead"]
    assert finished_signals[1:] == [(failing.id, "FAILED", ["builtins.ValueError"] * 2)]


@pytest.mark.django_db(transaction=True)  # committed, as in an app: the collection is known
def test_enqueue_is_one_statement(monkeypatch: pytest.MonkeyPatch) -> None:
    noop_task.enqueue()  # the first one of a process also makes sure the collection exists
    statements: list[str] = []
    execute = psycopg.Cursor.execute

    def counted(cursor: psycopg.Cursor, query: Any, *args: Any, **kwargs: Any) -> Any:
        statements.append(str(query))
        return execute(cursor, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", counted)
    noop_task.enqueue()
    assert len(statements) == 1, statements


def test_a_return_value_that_is_not_json_fails_the_task() -> None:
    result = returns_a_set.enqueue()
    run_due()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class is TypeError


def test_a_task_that_takes_context_sees_its_result_and_attempt() -> None:
    result = get_task_id.enqueue()
    run_due()
    result.refresh()
    assert result.return_value == {"id": result.id, "attempt": 1}


def test_retries_when_the_backend_allows_several_attempts(settings: Any) -> None:
    # Given a backend that gives tasks two attempts, and a task that fails
    settings.TASKS = {"default": {"BACKEND": BACKEND, "OPTIONS": {"MAX_ATTEMPTS": 2}}}
    result = failing_task_value_error.enqueue()
    # When the first attempt fails, Then the task is ready again, the error recorded
    assert run_due() == ["retrying"]
    result.refresh()
    assert (result.status, len(result.errors), result.attempts) == (TaskResultStatus.READY, 1, 1)
    # When the second attempt fails too, Then it failed for good after two attempts
    assert run_due(now=timezone.now() + timedelta(hours=1)) == ["dead"]
    result.refresh()
    assert (result.status, len(result.errors), result.attempts) == (TaskResultStatus.FAILED, 2,
                                                                    2)


def test_a_cancelled_task_is_failed() -> None:
    result = noop_task.enqueue()
    store.cancel(int(result.id), now=timezone.now())
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert "Cancelled" in result.errors[0].traceback


def test_statuses_map_to_django_tasks_statuses() -> None:
    assert set(backend_module.STATUSES) == set(TaskStatus)


def test_enqueue_and_run_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger=LOGGER_NAME):
        result = noop_task.enqueue()
        run_due()
    lines = [r.getMessage() for r in caplog.records if r.name == LOGGER_NAME]
    assert any("enqueued" in line and result.id in line for line in lines)
    assert any("state=RUNNING" in line for line in lines)
    assert any("state=SUCCESSFUL" in line for line in lines)


# --- end to end: a real consumer and worker ----------------------------------------------


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_tasks_run_on_a_real_worker(processes: Processes, redis_client: redis.Redis) -> None:
    # Given @task functions enqueued through the project's own settings
    good = add.using(priority=50).enqueue(40, b=2)
    bad = failing_task_own_error.enqueue()
    # When a consumer and a worker that knows this module's tasks run
    processes.start("runconsumer", "--poll-interval", "0.2")
    processes.start("runworker", "django_tasks.run", "--threads", "2", env=WORKER_ENV())

    def finished() -> bool:
        for result in (good, bad):
            result.refresh()
        return good.is_finished and bad.is_finished

    wait_for(finished, timeout_s=60, message="both results")
    # Then the results and the error come back to the caller
    assert (good.status, good.return_value, good.attempts) == (TaskResultStatus.SUCCESSFUL,
                                                               {"sum": 42}, 1)
    assert bad.status == TaskResultStatus.FAILED
    assert bad.errors[0].exception_class is TaskBroke
    assert good.worker_ids[0] != "w1"


def WORKER_ENV(**more: str) -> dict[str, str]:  # noqa: N802 - reads like the constant it was
    """A worker's environment: it may run this module's @task functions."""
    return subprocess_env(ATF_DJANGO_TASKS_MODULES=__name__, **more)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_failures_due_order_and_signals_on_a_real_worker(
        processes: Processes, redis_client: redis.Redis) -> None:
    # Given two overdue tasks enqueued in the opposite order of their due times
    now = timezone.now()
    due_2h_ago = noop_task.using(run_after=now - timedelta(hours=2)).enqueue()
    due_10h_ago = noop_task.using(run_after=now - timedelta(hours=10)).enqueue()
    # ...and tasks that raise SystemExit, KeyboardInterrupt and an ordinary exception
    raising = {exception: func.enqueue() for func, exception in (
        (failing_task_system_exit, "builtins.SystemExit"),
        (failing_task_keyboard_interrupt, "builtins.KeyboardInterrupt"),
        (failing_task_value_error, "builtins.ValueError"),
    )}
    after = add.enqueue(1, b=1)
    # When a consumer and a single-threaded worker run them all
    processes.start("runconsumer", "--poll-interval", "0.2")
    processes.start("runworker", "django_tasks.run", "--threads", "1",
                    env=WORKER_ENV(**{SIGNALS_KEY: "signals"}))
    everything = [due_2h_ago, due_10h_ago, *raising.values(), after]

    def finished() -> bool:
        for result in everything:
            result.refresh()
        return all(result.is_finished for result in everything)

    wait_for(finished, timeout_s=60, message="every result")
    # Then the longest overdue ran first
    assert due_10h_ago.started_at < due_2h_ago.started_at
    # ...each failure has the class its task raised, with its traceback
    for exception, result in raising.items():
        assert result.status == TaskResultStatus.FAILED
        assert result.errors[0].exception_class_path == exception
        assert result.errors[0].traceback.rstrip().endswith(exception.rsplit(".")[-1] + ": "
                                                             "This task failed due to "
                                                             + exception.rsplit(".")[-1])
    # ...the one executor outlived them all
    assert (after.status, after.return_value) == (TaskResultStatus.SUCCESSFUL, {"sum": 2})
    # ...and task_finished was sent once per task, a failure's with its error
    signals = {line["id"]: line for line in map(json.loads, redis_client.lrange("signals", 0, -1))}
    assert len(redis_client.lrange("signals", 0, -1)) == len(everything)
    for exception, result in raising.items():
        assert (signals[result.id]["status"], signals[result.id]["errors"]) == ("FAILED",
                                                                               [exception])
    assert signals[after.id]["status"] == "SUCCESSFUL"
