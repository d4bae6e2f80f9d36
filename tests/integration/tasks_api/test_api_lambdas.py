"""Lambdas, collections and their gates; dead letters; stats."""

from __future__ import annotations

from datetime import timedelta

import pytest
import redis
from django.utils import timezone

from tasks_core import latency_buckets, queues
from tasks_core.models import Collection, Lambda, TaskEntity
from tasks_core.queues import Message
from tasks_core.states import TaskStatus
from tests.factories import TaskFactory
from tests.integration.tasks_api.test_api_support import Member, member

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice() -> Member:
    return member("alpha")


def test_list_lambdas_with_gates_collections_depths_and_counts(
        alice: Member, queue: queues.QueueBackend) -> None:
    # Given a lambda with two tasks, two collections (one paused) and two messages queued
    TaskFactory(lambda_ref=alice.lam, collection="mail")
    TaskFactory(lambda_ref=alice.lam, status=TaskStatus.DEAD)
    Collection.objects.create(lambda_ref=alice.lam, name="default")
    Collection.objects.create(lambda_ref=alice.lam, name="mail", gate="paused")
    queue.push(queue.queue_name(alice.lam.name, "high"),
               [Message(task_id=1, lease=1), Message(task_id=2, lease=1)])
    # When the lambdas are listed
    response = alice.client.get("/api/v1/lambdas/")
    # Then it shows with all of that
    assert response.status_code == 200
    [shown] = response.json()
    assert (shown["name"], shown["team"], shown["gate"]) == (alice.lam.name, "alpha", "open")
    assert {c["name"]: c["gate"] for c in shown["collections"]} == {"mail": "paused",
                                                                      "default": "open"}
    assert shown["queue_depth"] == {"high": 2, "default": 0, "low": 0}
    assert (shown["counts"]["new"], shown["counts"]["dead"], shown["counts"]["success"]) == (
        1, 1, 0)


def test_read_one_lambda_by_its_dotted_name(alice: Member, queue: queues.QueueBackend) -> None:
    response = alice.client.get(f"/api/v1/lambdas/{alice.lam.name}/")
    assert response.status_code == 200
    assert response.json()["name"] == "alpha.work"
    assert alice.client.get("/api/v1/lambdas/no.such/").status_code == 404


def test_queue_depth_is_null_when_the_queue_is_unreachable(alice: Member,
                                                           settings: object) -> None:
    # Given a queue service nobody listens on
    settings.ATF_REDIS_URL = "redis://127.0.0.1:1/0"  # type: ignore[attr-defined]
    # When the lambda is read
    response = alice.client.get(f"/api/v1/lambdas/{alice.lam.name}/")
    # Then it still answers, without depths
    assert response.status_code == 200
    assert response.json()["queue_depth"] is None


def test_pause_a_lambda_until_a_time_then_open_it(alice: Member) -> None:
    # When the lambda is paused until a time
    until = (timezone.now() + timedelta(hours=1)).replace(microsecond=0)
    response = alice.client.post(f"/api/v1/lambdas/{alice.lam.name}/gate/",
                                 {"state": "paused", "until": until.isoformat()}, format="json")
    # Then the lambda comes back paused, and the store says so
    assert response.status_code == 200, response.json()
    assert response.json()["gate"] == "paused"
    lam = Lambda.objects.get(pk=alice.lam.pk)
    assert (lam.gate, lam.gate_until) == ("paused", until)
    # And opening it clears the time
    response = alice.client.post(f"/api/v1/lambdas/{alice.lam.name}/gate/", {"state": "open"},
                                 format="json")
    assert (response.json()["gate"], response.json()["gate_until"]) == ("open", None)


@pytest.mark.parametrize(("body", "field"), [
    ({"state": "closed"}, "state"),
    ({}, "state"),
    ({"state": "open", "until": "2030-01-01T00:00:00Z"}, "until"),
    ({"state": "paused", "until": "tomorrow"}, "until"),
])
def test_a_bad_gate_answers_400(alice: Member, body: dict, field: str) -> None:
    response = alice.client.post(f"/api/v1/lambdas/{alice.lam.name}/gate/", body, format="json")
    assert response.status_code == 400
    assert field in response.json()


def test_drop_one_collection(alice: Member) -> None:
    # When one collection is dropped
    response = alice.client.post(f"/api/v1/lambdas/{alice.lam.name}/collections/marketing/gate/",
                                 {"state": "dropped"}, format="json")
    # Then that collection comes back dropped, and the lambda stays open
    assert response.status_code == 200, response.json()
    assert response.json() == {"lambda": alice.lam.name, "name": "marketing", "gate": "dropped",
                               "gate_until": None}
    assert Collection.objects.get(lambda_ref=alice.lam, name="marketing").gate == "dropped"
    assert Lambda.objects.get(pk=alice.lam.pk).gate == "open"


def test_list_dead_letters_filtered_by_collection(alice: Member) -> None:
    dead = TaskFactory(lambda_ref=alice.lam, status=TaskStatus.DEAD, collection="a")
    TaskFactory(lambda_ref=alice.lam, status=TaskStatus.DEAD, collection="b")
    TaskFactory(lambda_ref=alice.lam, status=TaskStatus.SUCCESS, collection="a")
    response = alice.client.get(f"/api/v1/dead-letters/?lambda={alice.lam.name}&collection=a")
    assert response.status_code == 200
    assert [task["id"] for task in response.json()["results"]] == [dead.pk]


def test_requeue_dead_letters_by_id(alice: Member) -> None:
    # Given two dead tasks and a finished one
    dead = [TaskFactory(lambda_ref=alice.lam, status=TaskStatus.DEAD, attempts=3)
            for _ in range(2)]
    done = TaskFactory(lambda_ref=alice.lam, status=TaskStatus.SUCCESS)
    # When all three are requeued by id
    response = alice.client.post("/api/v1/dead-letters/requeue/",
                                 {"ids": [t.pk for t in [*dead, done]]}, format="json")
    # Then the dead ones are new again with their attempts reset, and the finished one is not
    assert response.status_code == 200
    assert response.json() == {"requeued": 2}
    for task in dead:
        task.refresh_from_db()
        assert (task.status, task.attempts) == (TaskStatus.NEW, 0)
    assert TaskEntity.objects.get(pk=done.pk).status == TaskStatus.SUCCESS


def test_requeue_a_lambdas_dead_letters_of_one_collection(alice: Member) -> None:
    TaskFactory(lambda_ref=alice.lam, status=TaskStatus.DEAD, collection="a")
    TaskFactory(lambda_ref=alice.lam, status=TaskStatus.DEAD, collection="b")
    response = alice.client.post("/api/v1/dead-letters/requeue/",
                                 {"lambda": alice.lam.name, "collection": "a"}, format="json")
    assert response.json() == {"requeued": 1}
    assert TaskEntity.objects.filter(status=TaskStatus.DEAD).count() == 1


def test_discard_dead_letters(alice: Member) -> None:
    TaskFactory(lambda_ref=alice.lam, status=TaskStatus.DEAD)
    kept = TaskFactory(lambda_ref=alice.lam, status=TaskStatus.NEW)
    response = alice.client.post("/api/v1/dead-letters/discard/", {"lambda": alice.lam.name},
                                 format="json")
    assert response.json() == {"discarded": 1}
    assert list(TaskEntity.objects.values_list("pk", flat=True)) == [kept.pk]


@pytest.mark.parametrize(("body", "field"), [
    ({}, "non_field_errors"),
    ({"ids": [1], "lambda": "x"}, "non_field_errors"),
    ({"ids": []}, "ids"),
    ({"ids": ["one"]}, "ids"),
    ({"collection": "a"}, "non_field_errors"),
    ({"lambda": "no.such"}, "lambda"),
])
def test_a_bad_dead_letter_selection_answers_400(alice: Member, body: dict, field: str) -> None:
    for action in ("requeue", "discard"):
        response = alice.client.post(f"/api/v1/dead-letters/{action}/", body, format="json")
        assert response.status_code == 400
        assert field in response.json()


def test_stats_counts_depths_throughput_latency_and_failures(
        alice: Member, queue: queues.QueueBackend, redis_client: redis.Redis) -> None:
    # Given tasks that started 2, 4 and 6 seconds after they were due, and two failures
    now = timezone.now()
    for lateness in (2, 4, 6):
        TaskFactory(lambda_ref=alice.lam, status=TaskStatus.SUCCESS, attempts=1,
                    run_at=now - timedelta(seconds=60), finished_at=now - timedelta(seconds=10),
                    started_at=now - timedelta(seconds=60 - lateness))
    TaskFactory(lambda_ref=alice.lam, status=TaskStatus.DEAD, finished_at=now)
    TaskFactory(lambda_ref=alice.lam, status=TaskStatus.FATAL_FAILURE, finished_at=now)
    queue.push(queue.queue_name(alice.lam.name, "low"), [Message(task_id=9, lease=1)])
    # When the stats are read
    response = alice.client.get("/api/v1/stats/?minutes=5")
    # Then they add up
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["window_s"] == 300
    assert (body["counts"]["success"], body["counts"]["dead"], body["counts"]["new"]) == (3, 1, 0)
    assert body["counts_by_lambda"] == {alice.lam.name: {"success": 3, "dead": 1,
                                                         "fatal_failure": 1}}
    assert body["queue_depths"] == {alice.lam.name: {"high": 0, "default": 0, "low": 1}}
    assert sum(m["finished"] for m in body["throughput"]["minutes"]) == 5
    assert body["throughput"]["per_minute"] == pytest.approx(1.0)
    latency = body["delivery_latency"]
    assert latency["count"] == 3
    # (percentiles come from the rollup's log-scale buckets: within their error of the exact 4.0)
    assert latency["p50_s"] == pytest.approx(4.0, rel=latency_buckets.ERROR)
    assert 5.0 < latency["p99_s"] <= 6.0
    assert body["failures_by_lambda"] == {alice.lam.name: 2}
    assert body["live_workers"] == 0


@pytest.mark.parametrize("query", ["minutes=0", "minutes=abc", "minutes=99999", "bogus=1"])
def test_bad_stats_query_answers_400(alice: Member, query: str) -> None:
    assert alice.client.get(f"/api/v1/stats/?{query}").status_code == 400


def test_metrics_histogram_of_delivery_latency(alice: Member, queue: queues.QueueBackend) -> None:
    # Given first attempts that started 2, 4 and 6 seconds late, and a retry (left out)
    now = timezone.now()
    for lateness in (2, 4, 6):
        TaskFactory(lambda_ref=alice.lam, status=TaskStatus.SUCCESS, attempts=1,
                    run_at=now - timedelta(seconds=60), finished_at=now,
                    started_at=now - timedelta(seconds=60 - lateness))
    TaskFactory(lambda_ref=alice.lam, status=TaskStatus.SUCCESS, attempts=2,
                run_at=now - timedelta(seconds=60), finished_at=now, started_at=now)
    # When the metrics are scraped
    text = alice.client.get("/metrics").content.decode()
    # Then the histogram counts them into cumulative buckets, with their sum
    for bound, count in (("1.0", 0), ("2.5", 1), ("5.0", 2), ("10.0", 3), ("+Inf", 3)):
        assert f'atf_delivery_latency_seconds_bucket{{le="{bound}"}} {count}.0' in text
    assert "atf_delivery_latency_seconds_gcount 3.0" in text
    assert "atf_delivery_latency_seconds_gsum 12.0" in text
    assert f'atf_tasks{{lambda="{alice.lam.name}",status="success"}} 4.0' in text
