"""Async lambdas on real workers: their coroutines run on the worker process's event loop,
many at once on one thread, with the sync path's guarantees (workers/async_executor.py).

The time limit and the retries of async lambdas are the sync tests' own, parametrised
(tests/acceptance/test_time_limits.py, tests/acceptance/test_workers.py)."""

from __future__ import annotations

import json

import pytest
import redis
from django.db.models import F

from tasks_core import atf
from tasks_core.models import TaskAttempt, TaskEntity
from tests.acceptance.test_flow import most_at_once
from tests.acceptance.test_workers import FAST
from tests.attempts import attempts_of
from tests.conftest import Processes, subprocess_env, wait_for
from tests.remote import Workers

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

STARTED, ENDED = "demo:async-started", "demo:async-ended"


@pytest.fixture
def env() -> dict[str, str]:
    return subprocess_env(**FAST)


def status(task: TaskEntity) -> str:
    return TaskEntity.objects.get(pk=task.pk).status


def lines(redis_client: redis.Redis, key: str) -> list[dict]:
    return [json.loads(line) for line in redis_client.lrange(key, 0, -1)]


@pytest.mark.parametrize("kind", ["direct", "remote"])
def test_an_async_lambdas_result_is_stored(processes: Processes, env: dict[str, str],
                                           kind: str) -> None:
    # Given a task of an async lambda
    task = atf.schedule("demo.async_sleep", {"seconds": 0.2})
    # When a consumer and a worker of each kind run it
    processes.start("runconsumer", env=env)
    Workers(kind, processes, env).start("demo.async_sleep")
    # Then its coroutine was awaited and what it returned is the task's result
    wait_for(lambda: status(task) == "success", message="the task's success")
    assert TaskEntity.objects.get(pk=task.pk).result == {"slept": 0.2}
    (attempt,) = attempts_of(task.pk)
    assert attempt.outcome == "success"


def test_sixty_async_tasks_run_at_once_on_one_thread_of_one_worker(
        processes: Processes, env: dict[str, str], redis_client: redis.Redis) -> None:
    # Given 60 tasks of an async lambda that each sleep 10 s
    tasks = [atf.schedule("demo.async_record", {"key": ENDED, "seconds": 10})
             for _ in range(60)]
    # When one worker process with one executor thread runs them
    processes.start("runconsumer", env=env)
    processes.start("runworker", "demo.async_record", "--threads", "1", env=env)
    wait_for(lambda: all(status(task) == "success" for task in tasks), timeout_s=120,
             message="60 successes")
    # Then at least 50 of them were in flight at the same moment, all on one thread of one
    # process (the worker's event loop): their recorded intervals overlap
    records = lines(redis_client, ENDED)
    assert len(records) == 60
    assert len({(line["pid"], line["thread"]) for line in records}) == 1
    assert most_at_once(records) >= 50


@pytest.mark.parametrize(("lambda_name", "slot", "cancelled"), [
    ("demo.record", "--threads", False), ("demo.async_record", "--async-slots", True)],
    ids=["sync", "async"])
def test_a_lost_lease_discards_the_result_and_cancels_an_async_lambda(
        processes: Processes, env: dict[str, str], redis_client: redis.Redis,
        lambda_name: str, slot: str, cancelled: bool) -> None:
    # Given a running task that would sleep 15 s, on a worker that runs one task at a time
    first = atf.schedule(lambda_name, {"key": ENDED, "started_key": STARTED, "seconds": 15},
                         max_attempts=1)
    processes.start("runconsumer", env=env)
    worker = processes.start("runworker", lambda_name, slot, "1", env=env)
    wait_for(lambda: lines(redis_client, STARTED), message="the lambda to start")
    # When another execution takes the task over (its lease moves on)
    TaskEntity.objects.filter(pk=first.pk).update(lease=F("lease") + 1)
    # Then the worker's heartbeat finds the lease lost: an async lambda's coroutine is
    # cancelled at once, which frees the worker's one slot for the next task; a sync lambda
    # runs to its end (nothing can stop a thread safely but its time limit)
    after = atf.schedule(lambda_name, {"key": "demo:after", "seconds": 0})
    wait_for(lambda: status(after) == "success", timeout_s=60, message="the next task")
    assert bool(lines(redis_client, ENDED)) is not cancelled
    # ...and nothing of the first execution is recorded: the task ends as its heartbeat
    # timeout finds it, `lost` (with no attempt left: dead)
    wait_for(lambda: status(first) == "dead", timeout_s=60, message="the task dead")
    (attempt,) = TaskAttempt.objects.filter(task_id=first.pk)
    assert attempt.outcome == "lost"
    assert TaskEntity.objects.get(pk=first.pk).result is None
    assert worker.poll() is None
