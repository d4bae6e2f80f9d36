"""`workers.testing.run_due_tasks` and the `run_due_tasks` fixture: the tasks a test scheduled
run in the test's own transaction through the real lifecycle (consumer pass, queue, claim,
start, run, result), from pytest and from Django's TestCase."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from django.db import connection, transaction
from django.test import TestCase
from django.utils import timezone

from tasks_core import atf, attempt_history, registry, scheduling
from tasks_core.contrib.tasks_compat import TaskResultStatus, task
from tasks_core.models import TaskEntity
from tasks_core.states import TaskStatus
from tests.conftest import ROOT, subprocess_env
from workers.testing import TaskOutcome, run_due_tasks

# Also in the SQLite run (`make test`): many projects test on SQLite.
pytestmark = pytest.mark.sqlite

GREET, FLAKY = "tests.testing.greet", "tests.testing.flaky"
ASYNC_GREET = "tests.testing.async_greet"
RunDueTasks = Callable[..., list[TaskOutcome]]


def greet(ctx: atf.TaskContext, payload: Any) -> dict:
    return {"greeting": f"hello {payload['name']}"}


async def async_greet(ctx: atf.TaskContext, payload: Any) -> dict:
    await asyncio.sleep(0)
    return greet(ctx, payload)


def flaky(ctx: atf.TaskContext, payload: Any) -> str:
    if ctx.attempt == 1:
        raise ValueError("first attempts fail")
    return "second time lucky"


@pytest.fixture(autouse=True)
def lambdas(redis_client: redis.Redis) -> Iterator[None]:
    registry.register(GREET, team="testing")(greet)
    registry.register(FLAKY, team="testing", max_attempts=3, backoff_base=60.0)(flaky)
    registry.register(ASYNC_GREET, team="testing")(async_greet)
    yield
    for name in (GREET, FLAKY, ASYNC_GREET):
        registry.unregister(name)


@pytest.mark.parametrize("lambda_name", [GREET, ASYNC_GREET])
def test_a_task_scheduled_in_a_transaction_runs_and_reports_its_outcome(
        run_due_tasks: RunDueTasks, lambda_name: str) -> None:
    # Given a task scheduled in a transaction of the test's own (of a sync or async lambda)
    with transaction.atomic():
        task = atf.schedule(lambda_name, {"name": "ann"})
    # When the test runs the due tasks
    outcomes = run_due_tasks(lambdas=[lambda_name, FLAKY])
    # Then the task ran once, through the store, and its outcome says how
    assert outcomes == [TaskOutcome(task_id=task.pk, lambda_name=lambda_name, attempt=1,
                                    status=TaskStatus.SUCCESS,
                                    value={"greeting": "hello ann"}, error=None)]
    task.refresh_from_db()
    assert (task.status, task.attempts, task.result) == (
        TaskStatus.SUCCESS, 1, {"greeting": "hello ann"})
    assert [attempt.worker for attempt in attempt_history.everything(task)] == ["testing"]


def test_a_rolled_back_task_never_runs(run_due_tasks: RunDueTasks) -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        atf.schedule(GREET, {"name": "bob"})
        raise RuntimeError("the order failed")
    assert run_due_tasks() == []


def test_a_chain_runs_step_after_step(run_due_tasks: RunDueTasks) -> None:
    first, second = atf.chain(atf.call(GREET, {"name": "one"}), atf.call(GREET, {"name": "two"}))
    outcomes = run_due_tasks(lambdas=[GREET])
    assert [(o.task_id, o.status) for o in outcomes] == [
        (first.pk, TaskStatus.SUCCESS), (second.pk, TaskStatus.SUCCESS)]


def test_a_retry_waits_for_its_backoff_and_runs_at_a_later_now(
        run_due_tasks: RunDueTasks) -> None:
    task = atf.schedule(FLAKY)
    # When its first attempt fails
    (failed,) = run_due_tasks(lambdas=[FLAKY])
    assert (failed.status, failed.error["type"]) == (TaskStatus.RETRYING, "ValueError")
    # Then it is not due again until its backoff has passed
    assert run_due_tasks(lambdas=[FLAKY]) == []
    (retried,) = run_due_tasks(lambdas=[FLAKY], now=timezone.now() + timedelta(hours=1))
    assert (retried.task_id, retried.attempt, retried.status, retried.value) == (
        task.pk, 2, TaskStatus.SUCCESS, "second time lucky")


def test_a_paused_lambda_holds_its_tasks_as_a_consumer_would(
        run_due_tasks: RunDueTasks) -> None:
    atf.schedule(GREET, {"name": "ann"})
    scheduling.set_gate(GREET, "paused")
    assert run_due_tasks(lambdas=[GREET]) == []
    assert TaskEntity.objects.get().status == TaskStatus.NEW
    scheduling.set_gate(GREET, "open")
    assert [o.status for o in run_due_tasks(lambdas=[GREET])] == [TaskStatus.SUCCESS]


@task()
def double(number: int) -> int:
    return 2 * number


def test_a_task_function_runs_and_its_result_reads_back(run_due_tasks: RunDueTasks) -> None:
    # Given a @task function enqueued (Django's tasks API, the ATF backend)
    result = double.enqueue(21)
    # When the test runs the due tasks, Then its result is Django's successful one
    assert [o.status for o in run_due_tasks()] == [TaskStatus.SUCCESS]
    result.refresh()
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 42)


class RunDueTasksInATestCase(TestCase):
    """Django's TestCase: the test's transaction never commits, the tasks run all the same."""

    def test_tasks_scheduled_in_the_test_transaction_run(self) -> None:
        with transaction.atomic():
            task = atf.schedule(GREET, {"name": "cy"})
        outcomes = run_due_tasks(lambdas=[GREET])
        self.assertEqual([(o.task_id, o.status, o.value) for o in outcomes],
                         [(task.pk, TaskStatus.SUCCESS, {"greeting": "hello cy"})])
        self.assertEqual(TaskEntity.objects.get(pk=task.pk).status, TaskStatus.SUCCESS)


#: A team's own test module: a fixture-based test and a Django TestCase, both running tasks.
USER_TESTS = '''
import pytest
from django.test import TestCase

from tasks_core import atf, registry
from workers.testing import run_due_tasks as run_in_test_case

registry.register("user.echo", team="user")(lambda ctx, payload: payload)


@pytest.mark.django_db
def test_with_the_fixture(run_due_tasks):
    atf.schedule("user.echo", {"n": 1})
    assert [o.value for o in run_due_tasks(lambdas=["user.echo"])] == [{"n": 1}]


class EchoTestCase(TestCase):
    def test_in_a_test_case(self):
        atf.schedule("user.echo", {"n": 2})
        self.assertEqual([o.value for o in run_in_test_case(lambdas=["user.echo"])], [{"n": 2}])
'''


@pytest.mark.skipif(connection.vendor != "postgresql", reason="a PostgreSQL test database")
def test_a_user_test_run_leaves_no_connection_and_drops_its_database(
        tmp_path: Path, db: None) -> None:
    # Given a team's test module that runs tasks, on a test database of its own
    (tmp_path / "test_user.py").write_text(USER_TESTS)
    database = f"{connection.settings_dict['NAME']}_user_run"
    env = {**subprocess_env(), "DJANGO_SETTINGS_MODULE": "tests.settings", "PYTHONPATH": str(ROOT),
           "ATF_TEST_DATABASE_NAME": database}
    # When pytest runs it (the checkout's plugin, as a team's pytest.ini names it)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "workers.pytest_plugin", "-p",
         "no:cacheprovider", "--rootdir", str(tmp_path), "-c", "/dev/null", str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    # Then both tests pass, the teardown has no complaint, and the database is gone
    output = run.stdout + run.stderr
    assert run.returncode == 0, output
    assert "2 passed" in output
    assert "being accessed by other users" not in output, output
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_database WHERE datname = %s", [database])
        assert cursor.fetchone() == (0,)
