"""Time limits on real workers: an attempt past its limit ends `timeout` and is retried; an
executor survives its lambda; a lambda that ignores its interrupt costs its process, which
replaces itself (or its supervisor restarts it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tasks_core import atf
from tasks_core.models import TaskAttempt, TaskEntity
from tests.acceptance.test_workers import FAST
from tests.conftest import Processes, subprocess_env, wait_for
from tests.remote import Workers
from workers.replacement import REPLACING
from workers.worker import EXIT_HUNG

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def env() -> dict[str, str]:
    return subprocess_env(**FAST, ATF_TIMEOUT_GRACE_S="1")


def status(task: TaskEntity) -> str:
    return TaskEntity.objects.get(pk=task.pk).status


def attempts(task: TaskEntity) -> list[TaskAttempt]:
    return list(TaskAttempt.objects.filter(task_id=task.pk).order_by("number"))


#: A sync lambda's worker of one thread; an async lambda's worker of one slot on its event loop
#: (its coroutine is cancelled at the limit: workers/async_executor.py).
ONE_AT_A_TIME = {
    "sync": ("demo.sleep", "demo.noop", ("--threads", "1")),
    "async": ("demo.async_sleep", "demo.async_sleep", ("--async-slots", "1")),
}


@pytest.mark.parametrize("kind", ONE_AT_A_TIME)
def test_an_attempt_past_its_time_limit_ends_timeout_and_its_executor_goes_on(
        processes: Processes, env: dict[str, str], kind: str) -> None:
    sleep, next_lambda, one_at_a_time = ONE_AT_A_TIME[kind]
    # Given a task that would sleep 30 s (heartbeating), with a time limit of 1 s, 2 attempts
    slow = atf.schedule(sleep, {"seconds": 30}, timeout=1, max_attempts=2)
    # When a consumer and a worker that runs one task at a time run it
    processes.start("runconsumer", env=env)
    worker = processes.start("runworker", *dict.fromkeys((sleep, next_lambda)), *one_at_a_time,
                             env=env)
    wait_for(lambda: status(slow) == "dead", timeout_s=60, message="the task dead")
    # Then each attempt ended `timeout` about a second after it began
    first, second = attempts(slow)
    assert [a.outcome for a in (first, second)] == ["timeout", "timeout"]
    assert {a.error["type"] for a in (first, second)} == {"TimeLimitExceeded"}
    assert all((a.ended_at - a.started_at).total_seconds() < 2.5 for a in (first, second))
    assert TaskEntity.objects.get(pk=slow.pk).last_error["type"] == "TimeLimitExceeded"
    # ...the retry waited at least twice the grace, so the interrupted lambda had stopped
    assert (second.started_at - first.ended_at).total_seconds() >= 2
    # ...and the one executor (or slot) was freed: it runs the next task, in the same process
    after = atf.schedule(next_lambda)
    wait_for(lambda: status(after) == "success", message="the next task")
    assert worker.poll() is None


@pytest.mark.parametrize("kind", ["direct", "remote"])
def test_the_default_time_limit_applies_when_neither_task_nor_lambda_has_one(
        processes: Processes, env: dict[str, str], kind: str) -> None:
    # Given a default time limit of 1 s, and a task of a lambda registered without one
    env = {**env, "ATF_TASK_TIMEOUT_S": "1"}
    slow = atf.schedule("demo.sleep", {"seconds": 30}, max_attempts=1)
    # When a consumer and a worker of each kind run it
    processes.start("runconsumer", env=env)
    Workers(kind, processes, env).start("demo.sleep", "--threads", "1")
    # Then its attempt ends `timeout` at the default, and with no attempt left it is dead
    wait_for(lambda: status(slow) == "dead", timeout_s=30, message="the task dead")
    (attempt,) = attempts(slow)
    assert attempt.outcome == "timeout"
    assert (attempt.ended_at - attempt.started_at).total_seconds() < 2.5


@pytest.mark.parametrize("processes_n", [1, 2])
def test_a_lambda_that_ignores_its_interrupt_costs_its_process_which_is_replaced(
        processes: Processes, env: dict[str, str], processes_n: int) -> None:
    # Given a task that hangs in one long sleep, with a time limit of 1 s and 2 attempts, and
    # tasks of another lambda
    hung = atf.schedule("demo.hang", {"seconds": 3600}, timeout=1, max_attempts=2)
    others = [atf.schedule("demo.noop") for _ in range(20)]
    # When a consumer and a worker run them: one process of two threads, which has no
    # supervisor, or a supervisor of two such processes
    processes.start("runconsumer", env=env)
    worker = processes.start("runworker", "demo.hang", "demo.noop", "--processes",
                             str(processes_n), "--threads", "2", env=env)
    wait_for(lambda: status(hung) == "dead", timeout_s=90, message="the task dead")
    # Then both attempts ended `timeout`
    assert [a.outcome for a in attempts(hung)] == ["timeout", "timeout"]

    # ...and each time the process that ran it ended: replaced by a fresh image of itself (the
    # same pid), or exited with EXIT_HUNG and restarted by its supervisor
    def log() -> str:
        return Path(worker.log_path).read_text()  # type: ignore[attr-defined]

    ended = (REPLACING if processes_n == 1
             else f"exited with {EXIT_HUNG}; restarting")
    wait_for(lambda: log().count(ended) == 2, message="the process ended twice")
    assert "did not stop within 1s of its time limit" in log()
    if processes_n == 1:
        assert {a.worker.split(":")[1] for a in attempts(hung)} == {str(worker.pid)}
    # ...while the other lambda's tasks ran, and the worker goes on serving
    wait_for(lambda: all(status(task) == "success" for task in others),
             message="the other lambda's tasks")
    after = atf.schedule("demo.noop")
    wait_for(lambda: status(after) == "success", message="the next task")
    assert worker.poll() is None
