"""The queues' age (how long the oldest task waiting in each queue has waited): in /metrics,
in the lambdas' API, counted from the first enqueue, per team, and in one query."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from tasks_core import atf, queue_age, store
from tasks_core.gating import Decision
from tasks_core.models import Lambda, TaskEntity
from tasks_core.states import TaskStatus
from tests.factories import LambdaFactory, TaskFactory
from tests.integration.tasks_api.test_api_support import member

pytestmark = pytest.mark.django_db

METRIC = "atf_queue_oldest_age_seconds"


def ages(client: object) -> dict[tuple[str, str], float]:
    response = client.get("/metrics")  # type: ignore[attr-defined]
    assert response.status_code == 200
    return {(s.labels["lambda"], s.labels["priority"]): s.value
            for family in text_string_to_metric_families(response.content.decode())
            for s in family.samples if s.name == METRIC}


def test_each_queue_shows_its_oldest_waiting_task_to_its_own_team_only() -> None:
    # Given alice's lambda with two high tasks enqueued 120 s and 10 s ago, a claimed one
    # enqueued long before, and bob's lambda with a task waiting an hour
    alice, bob = member("alpha"), member("beta")
    now = timezone.now()
    TaskFactory(lambda_ref=alice.lam, priority="high", status=TaskStatus.ENQUEUED,
                enqueued_at=now - timedelta(seconds=120))
    TaskFactory(lambda_ref=alice.lam, priority="high", status=TaskStatus.ENQUEUED,
                enqueued_at=now - timedelta(seconds=10))
    TaskFactory(lambda_ref=alice.lam, priority="low", status=TaskStatus.CLAIMED,
                enqueued_at=now - timedelta(hours=2))
    TaskFactory(lambda_ref=bob.lam, status=TaskStatus.ENQUEUED,
                enqueued_at=now - timedelta(hours=1))
    # When alice reads the metrics and her lambdas
    shown = ages(alice.client)
    [lam] = alice.client.get("/api/v1/lambdas/").json()
    # Then her high queue is about 120 s old, her other queues 0, and bob's lambda is absent
    assert set(shown) == {("alpha.work", p) for p in ("high", "default", "low")}
    assert 120 <= shown[("alpha.work", "high")] < 130
    assert shown[("alpha.work", "default")] == shown[("alpha.work", "low")] == 0
    assert 120 <= lam["queue_age_s"]["high"] < 130
    assert lam["queue_age_s"]["default"] == lam["queue_age_s"]["low"] == 0
    assert 3600 <= ages(bob.client)[("beta.work", "default")] < 3610


def test_a_re_enqueue_after_the_timeout_keeps_the_age(settings: object) -> None:
    # Given a task enqueued by the consumer and never claimed
    settings.ATF_ENQUEUE_TIMEOUT_S = 10  # type: ignore[attr-defined]
    task = atf.schedule("demo.noop")
    lambda_id = Lambda.objects.get(name="demo.noop").pk
    first = timezone.now() + timedelta(seconds=1)
    store.enqueue_due(lambda_id, limit=10, now=first, skip_collections=[],
                      decide=lambda _collection: Decision.ENQUEUE)
    # When its enqueue timeout fires and the consumer enqueues it again
    later = first + timedelta(seconds=11)
    batch = store.enqueue_due(lambda_id, limit=10, now=later, skip_collections=[],
                              decide=lambda _collection: Decision.ENQUEUE)
    assert batch.reenqueued == {"enqueued": 1}
    # Then the queue's age still counts from the first enqueue
    assert TaskEntity.objects.get(pk=task.pk).enqueued_at == first
    assert queue_age.oldest_waiting_s(now=later)["demo.noop"]["default"] == 11


def test_the_ages_of_many_lambdas_take_one_query() -> None:
    # Given twenty lambdas, each with an enqueued task
    for n in range(20):
        TaskFactory(lambda_ref=LambdaFactory(name=f"many.l{n}"), status=TaskStatus.ENQUEUED,
                    enqueued_at=timezone.now())
    # When their ages are read
    with CaptureQueriesContext(connection) as queries:
        found = queue_age.oldest_waiting_s(now=timezone.now())
    # Then all come from one query (one index probe per queue inside it)
    assert len(queries) == 1
    assert {name for name in found if name.startswith("many.")} == {
        f"many.l{n}" for n in range(20)}
