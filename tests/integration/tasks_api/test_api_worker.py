"""The worker API: remote workers claim, start, renew and finish tasks over HTTP, team-scoped.

Real PostgreSQL and Redis: the consumer's pass pushes tasks to the queues, the API pops and
claims them for the worker.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import override_settings
from django.utils import timezone
from rest_framework.test import APIClient

from tasks_api import memory
from tasks_api.models import Scope
from tasks_core import atf
from tasks_core.conf import atf_settings
from tasks_core.models import TaskEntity, Worker
from tasks_core.queues import Message, QueueBackend
from tests.attempts import attempts_of
from tests.factories import LambdaFactory
from tests.integration.tasks_api.test_api_support import Member, member, token_client
from workers.consumer import Consumer

pytestmark = [pytest.mark.django_db]

API = "/api/v1/worker/"


def worker_member(team_name: str) -> Member:
    """A member of `team_name` whose client sends a worker token of that team."""
    who = member(team_name, lambda_name=f"{team_name}.work")
    return dataclasses.replace(who, client=token_client(who.user, who.team, scope=Scope.WORKER))


@pytest.fixture
def team_a(queue: QueueBackend) -> Member:
    return worker_member("wa")


@pytest.fixture
def team_b(queue: QueueBackend) -> Member:
    return worker_member("wb")


@pytest.fixture
def consumer(queue: QueueBackend) -> Iterator[Consumer]:
    yield Consumer(batch_size=500, poll_interval_s=0.1, queue=queue)


def post(client: APIClient, path: str, body: Any) -> Any:
    return client.post(API + path, body, format="json")


def register(who: Member, worker: str, *, threads: int = 4) -> str:
    answer = post(who.client, "register/", {"worker": worker, "host": "h", "pid": 1,
                                            "lambdas": [who.lam.name], "threads": threads})
    assert answer.status_code == 201, answer.json()
    return worker


def ready_tasks(who: Member, consumer: Consumer, count: int = 1) -> list[int]:
    """Schedule `count` tasks of `who`'s lambda and let the consumer push them to the queue."""
    ids = [atf.schedule(who.lam.name, {"n": n}).pk for n in range(count)]
    consumer.run_pass()
    return ids


def claim(who: Member, worker: str, *, max_count: int = 10, wait_s: float = 0) -> list[dict]:
    answer = post(who.client, "claim/", {"worker": worker, "max": max_count, "wait_s": wait_s})
    assert answer.status_code == 200, answer.json()
    return answer.json()["tasks"]


def leases(tasks: list[dict]) -> list[dict[str, int]]:
    return [{"id": t["id"], "lease": t["lease"]} for t in tasks]


def finish(who: Member, worker: str, tasks: list[dict], **result: Any) -> list[dict]:
    body = {"worker": worker, "results": [{**lease, "outcome": "success", **result}
                                          for lease in leases(tasks)]}
    answer = post(who.client, "finish/", body)
    assert answer.status_code == 200, answer.json()
    return answer.json()["results"]


def test_a_remote_worker_claims_starts_renews_and_finishes_a_task(team_a: Member,
                                                                  consumer: Consumer) -> None:
    # Given a registered worker and a task in its lambda's queue
    worker = register(team_a, "host-a:1:abc")
    (task_id,) = ready_tasks(team_a, consumer)
    timeouts = post(team_a.client, "lambdas/", {"lambdas": ["wa.work", "no.such"]}).json()
    assert timeouts == {"lambdas": [{"name": "wa.work", "heartbeat_timeout_s": 30.0}],
                        "unknown": ["no.such"]}
    # When it claims, starts, heartbeats and finishes it
    (claimed,) = claim(team_a, worker)
    assert claimed == {"id": task_id, "lease": claimed["lease"], "lambda": "wa.work",
                       "collection": "default", "priority": "default", "payload": {"n": 0},
                       "attempt": 1, "max_attempts": 3, "timeout_s": None,
                       "heartbeat_timeout_s": 30.0}
    started = post(team_a.client, "start/", {"tasks": leases([claimed])}).json()
    assert started == {"tasks": [{"id": task_id, "started": True}]}
    beat = post(team_a.client, "heartbeat/", {"worker": worker, "tasks": leases([claimed])})
    assert beat.json() == {"lost": [], "cancel": []}
    done = finish(team_a, worker, [claimed], result={"ok": 1},
                  started_at="2026-01-01T00:00:00Z")
    # Then the task succeeded with its result, and the attempt names the worker
    assert done == [{"id": task_id, "status": "success"}]
    row = TaskEntity.objects.get(pk=task_id)
    assert (row.status, row.result, row.worker) == ("success", {"ok": 1}, worker)
    (attempt,) = attempts_of(task_id)
    assert (attempt.worker, attempt.outcome) == (worker, "success")
    # And stopping marks the registry row
    assert post(team_a.client, "stopped/", {"worker": worker}).status_code == 200
    assert Worker.objects.get(worker_id=worker).stopped_at is not None


def test_a_retry_and_a_fatal_outcome_are_recorded_as_the_store_decides(
        team_a: Member, consumer: Consumer) -> None:
    worker = register(team_a, "host-a:1:out")
    ready_tasks(team_a, consumer, 2)
    first, second = claim(team_a, worker)
    post(team_a.client, "start/", {"tasks": leases([first, second])})
    error = {"type": "Boom", "message": "it broke", "traceback": "Traceback ..."}
    body = {"worker": worker, "results": [
        {**leases([first])[0], "outcome": "retry", "error": error, "delay_s": 60},
        {**leases([second])[0], "outcome": "fatal", "error": error}]}
    answer = post(team_a.client, "finish/", body).json()
    assert answer == {"results": [{"id": first["id"], "status": "retrying"},
                                  {"id": second["id"], "status": "fatal_failure"}]}
    assert TaskEntity.objects.get(pk=first["id"]).last_error["type"] == "Boom"


def running_task(who: Member, consumer: Consumer, worker_id: str) -> tuple[str, dict]:
    """A registered worker of `who`'s, and a task it claimed and started."""
    worker = register(who, worker_id)
    ready_tasks(who, consumer)
    (running,) = claim(who, worker)
    post(who.client, "start/", {"tasks": leases([running])})
    return worker, running


def claim_carrying(who: Member, worker: str, tasks: list[dict], *, wait_s: float = 0,
                   **result: Any) -> Any:
    """A claim (claimed and started at once) carrying a success result for each of `tasks`."""
    return post(who.client, "claim/", {
        "worker": worker, "max": 10, "wait_s": wait_s, "start": True,
        "results": [{**lease, "outcome": "success", **result} for lease in leases(tasks)]})


def test_a_claim_carries_results_as_finish_takes_them_and_answers_them_as_finish_does(
        team_a: Member, consumer: Consumer) -> None:
    # Given a running task, and two more ready
    worker, running = running_task(team_a, consumer, "host-a:1:carry")
    ready = set(ready_tasks(team_a, consumer, 2))
    # When the worker claims, carrying the running task's result
    answer = claim_carrying(team_a, worker, [running], result={"ok": 1},
                            started_at="2026-01-01T00:00:00Z")
    # Then the result is recorded and answered per task, and the ready tasks are claimed
    assert answer.status_code == 200, answer.json()
    assert answer.json()["results"] == [{"id": running["id"], "status": "success"}]
    assert {task["id"] for task in answer.json()["tasks"]} == ready
    row = TaskEntity.objects.get(pk=running["id"])
    assert (row.status, row.result) == ("success", {"ok": 1})
    assert [attempt.worker for attempt in attempts_of(running["id"])] == [worker]
    # ...and a claim that carries none answers no results
    assert post(team_a.client, "claim/", {"worker": worker, "max": 1}).json() == {
        "tasks": [], "results": []}


def test_a_claim_carrying_results_answers_at_once_without_work(
        team_a: Member, consumer: Consumer) -> None:
    worker, running = running_task(team_a, consumer, "host-a:1:nowait")
    began = time.monotonic()
    answer = claim_carrying(team_a, worker, [running], wait_s=5)
    assert answer.json() == {"tasks": [], "results": [{"id": running["id"],
                                                       "status": "success"}]}
    assert time.monotonic() - began < 2


def test_a_result_over_the_limit_ends_the_task_as_a_failure_its_owner_sees(
        team_a: Member, consumer: Consumer, settings: Any) -> None:
    # Given a remote worker's running task, and a result limit of 1 KiB
    settings.ATF_MAX_RESULT_BYTES = 1024
    worker = register(team_a, "host-a:1:big")
    ready_tasks(team_a, consumer)
    (claimed,) = claim(team_a, worker)
    post(team_a.client, "start/", {"tasks": leases([claimed])})
    # When it finishes with a 2 KiB result
    done = finish(team_a, worker, [claimed], result={"blob": "x" * 2048})
    # Then the attempt ended as a fatal failure, and the lambda's owner reads why
    assert done == [{"id": claimed["id"], "status": "fatal_failure"}]
    owner = token_client(team_a.user, team_a.team)
    shown = owner.get(f"/api/v1/tasks/{claimed['id']}/").json()
    assert (shown["status"], shown["result"]) == ("fatal_failure", None)
    assert shown["last_error"]["type"] == "ResultTooLarge"
    assert "the limit is 1024 (ATF_MAX_RESULT_BYTES)" in shown["last_error"]["message"]
    assert shown["attempt_history"][0]["outcome"] == "fatal"


def test_a_worker_token_stops_working_when_its_user_leaves_the_team(team_a: Member) -> None:
    # Given a worker token that works
    worker = register(team_a, "host-a:1:leaver")
    assert post(team_a.client, "heartbeat/", {"worker": worker, "tasks": []}).status_code == 200
    # When its user is removed from the team
    team_a.team.members.remove(team_a.user)
    # Then every worker call refuses it (as every other token is refused, within the token
    # memory's ATF_API_AUTH_CACHE_S; at once in this process)
    for path, body in [("register/", {"worker": "host-a:2:x", "host": "h", "pid": 2,
                                      "lambdas": [team_a.lam.name], "threads": 1}),
                       ("claim/", {"worker": worker, "max": 1, "wait_s": 0}),
                       ("heartbeat/", {"worker": worker, "tasks": []})]:
        answer = post(team_a.client, path, body)
        assert answer.status_code == 401
        assert answer.json() == {"detail": "The token's user is no longer a member of its team."}


def test_a_lease_is_bound_to_the_worker_that_claimed_it(team_a: Member,
                                                        consumer: Consumer) -> None:
    # Given a task claimed by a worker of team A, and another worker token of team A
    worker = register(team_a, "host-a:1:owner")
    ready_tasks(team_a, consumer)
    (claimed,) = claim(team_a, worker)
    other = dataclasses.replace(team_a, client=token_client(team_a.user, team_a.team,
                                                             scope=Scope.WORKER))
    other_worker = register(other, "host-a:2:other")
    # When the other token starts, renews, finishes or hands back that lease, as its own
    # worker or naming the claiming one
    started = post(other.client, "start/", {"tasks": leases([claimed])}).json()
    named = post(other.client, "heartbeat/", {"worker": worker, "tasks": leases([claimed])})
    beat = post(other.client, "heartbeat/", {"worker": other_worker,
                                             "tasks": leases([claimed])}).json()
    ended = finish(other, other_worker, [claimed], result={"forged": True})
    carried = claim_carrying(other, other_worker, [claimed], result={"forged": True}).json()
    released = post(other.client, "release/", {"tasks": leases([claimed])}).json()
    # Then nothing happened to it: its own worker still holds it and finishes it
    assert started == {"tasks": [{"id": claimed["id"], "started": False}]}
    assert named.status_code == 404  # another token's worker is not found
    assert beat == {"lost": [claimed["id"]], "cancel": []}
    assert ended == [{"id": claimed["id"], "status": None}]
    assert carried == {"tasks": [], "results": [{"id": claimed["id"], "status": None}]}
    assert released == {"released": 0}
    post(team_a.client, "start/", {"tasks": leases([claimed])})
    assert finish(team_a, worker, [claimed], result={"ok": 1}) == [
        {"id": claimed["id"], "status": "success"}]
    assert TaskEntity.objects.get(pk=claimed["id"]).result == {"ok": 1}


def test_a_stale_lease_is_refused_per_item_and_changes_nothing(team_a: Member,
                                                               consumer: Consumer) -> None:
    # Given two running tasks, one of which another worker took over since (its lease moved)
    worker = register(team_a, "host-a:1:stale")
    ready_tasks(team_a, consumer, 2)
    fresh, stale = claim(team_a, worker)
    post(team_a.client, "start/", {"tasks": leases([fresh, stale])})
    TaskEntity.objects.filter(pk=stale["id"]).update(lease=stale["lease"] + 1)
    # When the worker heartbeats and finishes both with the leases it holds
    beat = post(team_a.client, "heartbeat/", {"worker": worker, "tasks": leases([fresh, stale])})
    done = finish(team_a, worker, [fresh, stale], result=1)
    # Then the stale one is reported lost and refused, and stays as the new owner left it
    assert beat.json() == {"lost": [stale["id"]], "cancel": []}
    assert done == [{"id": fresh["id"], "status": "success"}, {"id": stale["id"], "status": None}]
    row = TaskEntity.objects.get(pk=stale["id"])
    assert (row.status, row.result) == ("processing", None)
    # And a start with a stale lease is refused too
    restarted = post(team_a.client, "start/", {"tasks": leases([stale])}).json()
    assert restarted == {"tasks": [{"id": stale["id"], "started": False}]}


def test_a_worker_stopped_is_refused_at_once_here_and_within_the_memory_elsewhere(
        team_a: Member, monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(memory, "_now", lambda: now[0])
    # Given a worker the API has seen
    first = register(team_a, "host-a:1:gone")
    assert claim(team_a, first) == []
    # When another process marks it stopped (the consumer, for a stale worker)
    Worker.objects.filter(worker_id=first).update(stopped_at=timezone.now())
    # Then its calls still pass while the API remembers it, and are refused after
    assert claim(team_a, first) == []
    now[0] += atf_settings.api_auth_cache_s + 0.1
    assert post(team_a.client, "claim/", {"worker": first, "max": 1, "wait_s": 0}
                ).status_code == 404
    # And a worker stopped through the API is refused at once
    second = register(team_a, "host-a:1:bye")
    assert claim(team_a, second) == []
    assert post(team_a.client, "stopped/", {"worker": second}).status_code == 200
    assert post(team_a.client, "claim/", {"worker": second, "max": 1, "wait_s": 0}
                ).status_code == 404


def test_a_start_retried_after_a_lost_answer_is_started_again(team_a: Member,
                                                               consumer: Consumer) -> None:
    # Given a task started, whose answer the worker never got
    worker = register(team_a, "host-a:1:retry")
    ready_tasks(team_a, consumer, 2)
    first, other = claim(team_a, worker)
    assert post(team_a.client, "start/", {"tasks": leases([first])}).json() == {
        "tasks": [{"id": first["id"], "started": True}]}
    # When the worker sends the same start again, with a task not started yet
    again = post(team_a.client, "start/", {"tasks": leases([first, other])}).json()
    # Then both are reported started, and the first was started once (one attempt)
    assert again == {"tasks": [{"id": first["id"], "started": True},
                               {"id": other["id"], "started": True}]}
    assert TaskEntity.objects.get(pk=first["id"]).attempts == 1
    # But once it has finished, a late start is refused
    finish(team_a, worker, [first], result=1)
    late = post(team_a.client, "start/", {"tasks": leases([first])}).json()
    assert late == {"tasks": [{"id": first["id"], "started": False}]}


def test_release_hands_back_claimed_tasks_at_once(team_a: Member, consumer: Consumer) -> None:
    worker = register(team_a, "host-a:1:rel")
    ready_tasks(team_a, consumer, 3)
    claimed = claim(team_a, worker)
    answer = post(team_a.client, "release/", {"tasks": leases(claimed)})
    assert answer.json() == {"released": 3}
    assert set(TaskEntity.objects.values_list("status", flat=True)) == {"new"}
    # Handing back twice releases nothing more
    assert post(team_a.client, "release/", {"tasks": leases(claimed)}).json() == {"released": 0}


def test_a_claim_waits_for_a_task_and_returns_as_soon_as_one_is_ready(
        team_a: Member, consumer: Consumer, queue: QueueBackend) -> None:
    worker = register(team_a, "host-a:1:poll")
    # An empty queue: the claim waits its whole wait_s, then answers no task
    started = time.monotonic()
    assert claim(team_a, worker, wait_s=1.0) == []
    assert time.monotonic() - started >= 0.9
    # A task whose message reaches the queue during the wait is answered at once
    (task_id,) = ready_tasks(team_a, consumer)
    queue_name = queue.queue_name(team_a.lam.name, "default")
    (popped,) = queue.pop([queue_name], max_count=1, wait_s=0)
    pusher = threading.Timer(0.5, queue.push, args=(queue_name, [popped.message]))
    pusher.start()
    started = time.monotonic()
    claimed = claim(team_a, worker, wait_s=15)
    pusher.join()
    assert [t["id"] for t in claimed] == [task_id]
    assert time.monotonic() - started < 10


def test_a_claim_pops_past_stale_messages_to_the_current_one(
        team_a: Member, consumer: Consumer, queue: QueueBackend) -> None:
    # Given a task whose current message sits behind many stale ones (it was enqueued again)
    worker = register(team_a, "host-a:1:stale-queue")
    (task_id,) = ready_tasks(team_a, consumer)
    queue_name = queue.queue_name(team_a.lam.name, "default")
    (current,) = queue.pop([queue_name], max_count=1, wait_s=0)
    # (older leases: a queue holds one copy of each message, so 50 stale ones need 50 leases)
    queue.push(queue_name, [Message(task_id=task_id, lease=current.message.lease - n)
                            for n in range(1, 51)])
    queue.push(queue_name, [current.message])
    # When the worker claims one task without waiting
    claimed = claim(team_a, worker, max_count=1, wait_s=0)
    # Then the service popped past the stale messages and claimed it in that one request
    assert [t["id"] for t in claimed] == [task_id]
    assert queue.depth(queue_name) == 0


def test_a_claim_returns_at_most_max_tasks(team_a: Member, consumer: Consumer) -> None:
    worker = register(team_a, "host-a:1:max")
    ready_tasks(team_a, consumer, 5)
    assert len(claim(team_a, worker, max_count=2)) == 2
    assert len(claim(team_a, worker, max_count=10)) == 3


def test_a_remote_workers_lambdas_take_turns_though_each_claim_is_its_own_request(
        team_a: Member, consumer: Consumer) -> None:
    # Given a worker of two lambdas, each with more tasks ready than one claim takes
    other = LambdaFactory(name="wa.other", team=team_a.team)
    answer = post(team_a.client, "register/", {"worker": "host-a:1:turns", "host": "h",
                                               "pid": 1, "threads": 4,
                                               "lambdas": [team_a.lam.name, other.name]})
    assert answer.status_code == 201, answer.json()
    for name in (team_a.lam.name, other.name):
        for n in range(4):
            atf.schedule(name, {"n": n})
    consumer.run_pass()
    # When it claims one task at a time
    firsts = [claim(team_a, "host-a:1:turns", max_count=1)[0]["lambda"] for _ in range(4)]
    # Then each lambda came first in turn (the API makes the claim's order anew per request,
    # from the pops of the whole process)
    assert sorted(firsts) == sorted([team_a.lam.name, other.name] * 2)
    assert firsts[0] != firsts[1]


# --- a worker's bound on the tasks it holds (ATF_API_HELD_TASKS_PER_THREAD) -------------------


def test_a_worker_holding_its_bound_gets_no_more_until_it_finishes_or_releases(
        team_a: Member, team_b: Member, consumer: Consumer) -> None:
    # Given a one-thread worker (a bound of 2) and more of its lambda's tasks ready than that
    worker = register(team_a, "host-a:1:bound", threads=1)
    ready_tasks(team_a, consumer, 6)
    # When it claims 10, it gets what its bound leaves: 2
    first, second = claim(team_a, worker, max_count=10)
    # Then its next claim, waiting or not, is refused naming the setting, and claims nothing
    for wait_s in (0, 5):
        began = time.monotonic()
        refused = post(team_a.client, "claim/", {"worker": worker, "max": 1, "wait_s": wait_s})
        assert (refused.status_code, refused["Retry-After"]) == (429, "1")
        assert "ATF_API_HELD_TASKS_PER_THREAD allows 2 per thread it registered" in (
            refused.json()["detail"])
        assert time.monotonic() - began < 2
    assert TaskEntity.objects.filter(status="claimed").count() == 2
    # And another worker of the team, and a worker of another team, claim as before
    assert len(claim(team_a, register(team_a, "host-a:2:bound", threads=1))) == 2
    (task_b,) = ready_tasks(team_b, consumer)
    assert [t["id"] for t in claim(team_b, register(team_b, "host-b:1:bound"))] == [task_b]
    # When it starts and finishes one, and releases the other, it may claim two again
    post(team_a.client, "start/", {"tasks": leases([first])})
    finish(team_a, worker, [first])
    (third,) = claim(team_a, worker, max_count=10)
    assert post(team_a.client, "release/", {"tasks": leases([second])}).json() == {"released": 1}
    assert len(claim(team_a, worker, max_count=10)) == 1
    # And a claim at its bound that carries a result records it and claims in the room it frees
    post(team_a.client, "start/", {"tasks": leases([third])})
    consumer.run_pass()  # the released task is due again
    carried = claim_carrying(team_a, worker, [third])
    assert carried.status_code == 200, carried.json()
    assert carried.json()["results"] == [{"id": third["id"], "status": "success"}]
    assert len(carried.json()["tasks"]) == 1


def test_a_result_with_a_stale_lease_frees_no_room(team_a: Member, consumer: Consumer) -> None:
    # Given a one-thread worker holding its bound, one of its tasks started
    worker = register(team_a, "host-a:1:stale-room", threads=1)
    ready_tasks(team_a, consumer, 4)
    running, _claimed = claim(team_a, worker, max_count=2)
    post(team_a.client, "start/", {"tasks": leases([running])})
    # When its claim carries a result of that task under a lease it does not hold
    stale = {**running, "lease": running["lease"] + 1}
    answer = claim_carrying(team_a, worker, [stale])
    # Then the result is refused and the claim gets nothing: the task is still held
    assert answer.json() == {"tasks": [], "results": [{"id": running["id"], "status": None}]}


# --- team isolation: a worker token of team B acts on nothing of team A ----------------------


def test_a_worker_of_another_team_can_claim_start_renew_finish_and_release_nothing(
        team_a: Member, team_b: Member, consumer: Consumer) -> None:
    # Given team A's worker with a running task and a claimed one, more in A's queue
    worker_a = register(team_a, "host-a:1:iso")
    worker_b = register(team_b, "host-b:1:iso")
    ready_tasks(team_a, consumer, 4)
    running, claimed = claim(team_a, worker_a, max_count=2)
    post(team_a.client, "start/", {"tasks": leases([running])})
    before = {row.pk: (row.status, row.lease, row.heartbeat_at, row.worker)
              for row in TaskEntity.objects.all()}
    # When team B's worker tries every worker call on them, with the right leases
    assert claim(team_b, worker_b, max_count=10, wait_s=0) == []
    started = post(team_b.client, "start/", {"tasks": leases([claimed])}).json()
    beat = post(team_b.client, "heartbeat/", {"worker": worker_b, "tasks": leases([running])})
    done = finish(team_b, worker_b, [running], result="b wrote this")
    carried = claim_carrying(team_b, worker_b, [running], result="b wrote this").json()
    released = post(team_b.client, "release/", {"tasks": leases([claimed])}).json()
    # Then nothing of A's started, renewed, finished or came back, and B learns nothing
    assert started == {"tasks": [{"id": claimed["id"], "started": False}]}
    assert beat.json() == {"lost": [running["id"]], "cancel": []}
    assert done == [{"id": running["id"], "status": None}]
    assert carried == {"tasks": [], "results": [{"id": running["id"], "status": None}]}
    assert released == {"released": 0}
    assert {row.pk: (row.status, row.lease, row.heartbeat_at, row.worker)
            for row in TaskEntity.objects.all()} == before
    # And A's worker still finds A's queued tasks
    assert len(claim(team_a, worker_a, max_count=10)) == 2


def test_a_worker_of_another_team_cannot_use_its_lambdas_or_its_workers(
        team_a: Member, team_b: Member) -> None:
    worker_a = register(team_a, "host-a:1:own")
    # B can neither register for A's lambda nor read its settings
    answer = post(team_b.client, "register/", {"worker": "host-b:1:x", "host": "h", "pid": 1,
                                               "lambdas": ["wa.work"], "threads": 1})
    assert answer.status_code == 400
    assert "wa.work" in answer.json()["lambdas"][0]
    assert post(team_b.client, "lambdas/", {"lambdas": ["wa.work"]}).json() == {
        "lambdas": [], "unknown": ["wa.work"]}
    # And A's worker id is unknown to B on every call that names a worker
    for path, body in [("claim/", {"max": 1}), ("heartbeat/", {"tasks": []}),
                       ("finish/", {"results": []}), ("stopped/", {})]:
        answer = post(team_b.client, path, {"worker": worker_a, **body})
        assert answer.status_code == 404, (path, answer.json())
    assert Worker.objects.get(worker_id=worker_a).stopped_at is None


# --- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize(("path", "body", "field"), [
    ("claim/", {"worker": "w:1", "max": 0}, "max"),
    ("claim/", {"worker": "w:1", "max": 100_000}, "max"),
    ("claim/", {"worker": "w:1", "max": 1, "wait_s": -1}, "wait_s"),
    ("claim/", {"worker": "bad id with spaces", "max": 1}, "worker"),
    ("claim/", {"worker": "w:1", "max": 1, "lambdas": ["x"]}, "lambdas"),
    ("start/", {"tasks": [{"id": 1, "lease": 1}, {"id": 1, "lease": 2}]}, "tasks"),
    ("start/", {"tasks": [{"id": "one", "lease": 1}]}, "tasks"),
    ("start/", {"tasks": [{"id": 1, "lease": 1}] * 1001}, "tasks"),
    ("finish/", {"worker": "w:1", "results": [{"id": 1, "lease": 1, "outcome": "won"}]},
     "results"),
    ("finish/", {"worker": "w:1", "results": [{"id": 1, "lease": 1, "outcome": "success",
                                               "result": "\u0000"}]}, "results"),
    ("finish/", {"worker": "w:1", "results": [{"id": 1, "lease": 1, "outcome": "retry",
                                               "error": {"type": "x"}}]}, "results"),
    ("register/", {"worker": "w:1", "host": "h", "pid": 1, "lambdas": [], "threads": 1},
     "lambdas"),
    # a claim's results: finish/'s field, with its checks and limits
    ("claim/", {"worker": "w:1", "max": 1, "results": "all"}, "results"),
    ("claim/", {"worker": "w:1", "max": 1, "results": [1]}, "results"),
    ("claim/", {"worker": "w:1", "max": 1, "results": [{"id": 1, "lease": 1}]}, "results"),
    ("claim/", {"worker": "w:1", "max": 1, "results": [{"id": 1, "lease": 1,
                                                        "outcome": "won"}]}, "results"),
    ("claim/", {"worker": "w:1", "max": 1, "results": [{"id": 1, "lease": 1,
                                                        "outcome": "success",
                                                        "result": "\u0000"}]}, "results"),
    ("claim/", {"worker": "w:1", "max": 1, "results": [{"id": 1, "lease": 1,
                                                        "outcome": "retry",
                                                        "error": {"type": "x"}}]}, "results"),
    ("claim/", {"worker": "w:1", "max": 1, "results": [{"id": 1, "lease": 1,
                                                        "outcome": "retry", "delay_s": -1}]},
     "results"),
    ("claim/", {"worker": "w:1", "max": 1, "results": [{"id": 1, "lease": 1,
                                                        "outcome": "success", "why": 1}]},
     "results"),
    ("claim/", {"worker": "w:1", "max": 1, "results": [{"id": 1, "lease": 1,
                                                        "outcome": "success"}] * 2}, "results"),
    ("claim/", {"worker": "w:1", "max": 1, "results": [
        {"id": n, "lease": 1, "outcome": "success"} for n in range(1, 1002)]}, "results"),
])
def test_bad_requests_get_field_errors(team_a: Member, path: str, body: dict,
                                       field: str) -> None:
    answer = post(team_a.client, path, body)
    assert answer.status_code == 400
    assert field in answer.json()


@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=1000)
@pytest.mark.parametrize("path", ["claim/", "finish/"])
def test_results_over_the_body_limit_answer_413_and_change_nothing(
        team_a: Member, consumer: Consumer, path: str) -> None:
    worker, running = running_task(team_a, consumer, f"host-a:1:big{path[0]}")
    body = {"worker": worker, "results": [{**leases([running])[0], "outcome": "success",
                                           "result": "x" * 2000}]}
    answer = post(team_a.client, path, {**body, "max": 1} if path == "claim/" else body)
    assert answer.status_code == 413
    assert answer["Content-Type"].startswith("application/json")
    assert TaskEntity.objects.get(pk=running["id"]).status == "processing"


def test_a_worker_id_cannot_be_registered_twice(team_a: Member) -> None:
    register(team_a, "host-a:1:twice")
    answer = post(team_a.client, "register/", {"worker": "host-a:1:twice", "host": "h",
                                               "pid": 1, "lambdas": ["wa.work"], "threads": 1})
    assert answer.status_code == 409


WORKER_CALLS = ["lambdas/", "register/", "claim/", "start/", "heartbeat/", "finish/",
                "release/", "stopped/"]


@pytest.mark.parametrize("path", WORKER_CALLS)
def test_every_worker_call_needs_credentials(path: str, team_a: Member) -> None:
    assert APIClient().post(API + path, {}, format="json").status_code == 401


@pytest.mark.parametrize("path", WORKER_CALLS)
def test_every_worker_call_refuses_a_full_token(path: str, team_a: Member) -> None:
    # A full token schedules and reads tasks; only a worker token makes the worker calls
    full = member("wa").client
    answer = full.post(API + path, {"worker": "host-a:1:full", "max": 1, "tasks": []},
                       format="json")
    assert answer.status_code == 403
    assert answer.json() == {"detail": "This call needs a worker token."}


def test_a_worker_token_can_neither_schedule_nor_read_tasks(team_a: Member) -> None:
    assert team_a.client.post("/api/v1/tasks/", {"lambda": "wa.work"},
                              format="json").status_code == 403
    assert team_a.client.get("/api/v1/tasks/").status_code == 403

