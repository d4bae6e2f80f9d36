"""The bounds on what remote workers hold, under simultaneous claims through the real API: a
worker's (ATF_API_HELD_TASKS_PER_THREAD per registered thread), its token's
(ATF_API_HELD_TASKS_PER_TOKEN, every worker of the token together), and the threads a worker
may register (ATF_API_MAX_WORKER_THREADS).

Each claim runs in its own thread and database connection, all let go at once (`race`), so
they count and claim beside each other as a server's threads and processes do.
"""

from __future__ import annotations

import functools
import threading
from collections import Counter
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings
from django.utils import timezone
from rest_framework.test import APIClient

from tasks_api import held_tasks
from tasks_api.models import Scope
from tasks_core import atf, store
from tasks_core.models import TaskEntity
from tasks_core.queues import QueueBackend
from tests.conftest import race, wait_for
from tests.factories import LambdaFactory
from tests.integration.tasks_api.test_api_support import member, new_token
from workers.consumer import Consumer

pytestmark = [pytest.mark.django_db(transaction=True)]

API = "/api/v1/worker/"


class Fleet:
    """Workers of one worker token; each call makes a client of its own (one per thread)."""

    def __init__(self, team_name: str) -> None:
        self.who = member(team_name, lambda_name=f"{team_name}.work")
        self.token = new_token(self.who.user, self.who.team, scope=Scope.WORKER)

    def post(self, path: str, body: dict[str, Any]) -> Any:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {self.token}")
        return client.post(API + path, body, format="json")

    def register(self, worker: str, threads: int) -> str:
        answer = self.post("register/", {"worker": worker, "host": "h", "pid": 1,
                                         "lambdas": [self.who.lam.name], "threads": threads})
        assert answer.status_code == 201, answer.json()
        return worker

    def ready(self, queue: QueueBackend, count: int) -> None:
        for n in range(count):
            atf.schedule(self.who.lam.name, {"n": n})
        Consumer(batch_size=500, poll_interval_s=0.1, queue=queue).run_pass()


def _claims(fleet: Fleet, workers: list[str], *, max_count: int) -> Counter[int]:
    """Every worker's claim at once; the answers' status codes, counted."""
    codes: Counter[int] = Counter()

    def claim(worker: str) -> None:
        codes[fleet.post("claim/", {"worker": worker, "max": max_count}).status_code] += 1

    race(*(functools.partial(claim, worker) for worker in workers))
    return codes


def _held() -> int:
    return TaskEntity.objects.filter(status__in=["claimed", "processing"]).count()


@override_settings(ATF_API_HELD_TASKS_PER_THREAD=2)
def test_thirty_simultaneous_claims_of_a_one_thread_worker_take_two(
        queue: QueueBackend) -> None:
    # Given a one-thread worker (a bound of 2) and forty of its lambda's tasks ready
    fleet = Fleet("race")
    worker = fleet.register("host-r:1", threads=1)
    fleet.ready(queue, 40)
    # When thirty of its claims, two tasks each, arrive at once
    codes = _claims(fleet, [worker] * 30, max_count=2)
    # Then it holds two; the claims that found no room were refused, none failed
    assert _held() == 2
    assert set(codes) <= {200, 429}, codes


@override_settings(ATF_API_HELD_TASKS_PER_THREAD=2, ATF_API_HELD_TASKS_PER_TOKEN=6)
def test_the_workers_of_one_token_hold_no_more_than_its_ceiling_together(
        queue: QueueBackend) -> None:
    # Given five four-thread workers of one token (each a bound of 8), a ceiling of 6
    fleet = Fleet("fleet")
    workers = [fleet.register(f"host-f:{n}", threads=4) for n in range(5)]
    fleet.ready(queue, 30)
    # When each claims eight, twice, all at once
    codes = _claims(fleet, workers * 2, max_count=8)
    # Then they hold six together, and the next claim is refused naming the ceiling
    assert _held() == 6
    assert set(codes) <= {200, 429}, codes
    refused = fleet.post("claim/", {"worker": workers[0], "max": 1})
    assert refused.status_code == 429
    assert "ATF_API_HELD_TASKS_PER_TOKEN allows 6" in refused.json()["detail"]


@override_settings(ATF_API_MAX_WORKER_THREADS=256)
def test_a_worker_may_register_no_more_threads_than_the_setting_allows() -> None:
    fleet = Fleet("threads")
    body = {"worker": "host-t:1", "host": "h", "pid": 1, "lambdas": [fleet.who.lam.name]}
    refused = fleet.post("register/", {**body, "threads": 257})
    assert refused.status_code == 400
    assert "ATF_API_MAX_WORKER_THREADS" in refused.json()["threads"][0], refused.json()
    assert fleet.post("register/", {**body, "threads": 256}).status_code == 201


@override_settings(ATF_API_HELD_TASKS_PER_THREAD=2)
def test_a_claim_whose_room_went_while_it_waited_puts_the_task_back(
        queue: QueueBackend) -> None:
    # Given a one-thread worker (a bound of 2) whose claim waits for work
    fleet = Fleet("wait")
    worker = fleet.register("host-w:1", threads=1)
    answers: list[Any] = []

    def waiting_claim() -> None:
        try:
            answers.append(fleet.post("claim/", {"worker": worker, "max": 2, "wait_s": 10}))
        finally:
            connection.close()

    waiter = threading.Thread(target=waiting_claim)
    waiter.start()
    try:
        wait_for(lambda: held_tasks._waiting.asked.get(worker))
        # When, meanwhile, another server process claims two tasks for it (the store's claim,
        # past this process's count of waiting claims: tasks of a lambda it does not wait on)
        side = LambdaFactory(name="wait.side", team=fleet.who.team)
        for n in range(2):
            atf.schedule(side.name, {"n": n})
        Consumer(batch_size=500, poll_interval_s=0.1, queue=queue).run_pass()
        popped = queue.pop([queue.queue_name(side.name, "default")], max_count=2, wait_s=0)
        assert len(store.claim([p.message for p in popped if p.message], worker=worker,
                               lambda_ids=[side.pk], now=timezone.now())) == 2
        # and then a task of its lambda is ready
        fleet.ready(queue, 1)
    finally:
        waiter.join(timeout=15)
    # Then the waiting claim takes nothing: its bound is full once it counts again
    assert answers[0].status_code == 200 and answers[0].json()["tasks"] == []
    assert _held() == 2
    # And the task it popped is back on the queue, for another worker to claim
    other = fleet.register("host-w:2", threads=1)
    assert len(fleet.post("claim/", {"worker": other, "max": 2}).json()["tasks"]) == 1
