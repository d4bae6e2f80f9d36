"""Flow control over the API: limits set with PATCH (a rate as "N/s|m|h"), shown with what they
hold back and their busiest keys; tasks scheduled with limit_key and debounce; /metrics."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from tasks_core import directory, store
from tasks_core.gating import Decision
from tasks_core.models import TaskEntity
from tests.integration.tasks_api.test_api_support import Member, member, schedule

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice() -> Member:
    return member("alpha")


def patch(who: Member, body: object) -> object:
    return who.client.patch(f"/api/v1/lambdas/{who.lam.name}/", body, format="json")


def hold_one(who: Member) -> list[TaskEntity]:
    """Two tasks of key "m-1" claimed together under key_concurrency 1: one runs, one held."""
    ids = [schedule(who, limit_key="m-1").json()["id"] for _ in range(2)]
    now = timezone.now() + timedelta(seconds=1)
    batch = store.enqueue_due(who.lam.pk, limit=10, now=now, skip_collections=[],
                              decide=lambda collection: Decision.ENQUEUE)
    store.claim([message for _priority, message in batch.messages], worker="w1",
                lambda_ids=[who.lam.pk], now=now, start=True)
    return list(TaskEntity.objects.filter(pk__in=ids))


def test_a_patch_sets_limits_and_a_rate_may_be_written_per_second_minute_or_hour(
        alice: Member) -> None:
    response = patch(alice, {"concurrency": 5, "rate": "10/m", "key_concurrency": 1,
                             "key_rate": "2/s"})
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["concurrency"]["value"] == 5
    assert body["rate"]["value"] == pytest.approx(10 / 60)
    assert (body["flow"]["rate"], body["flow"]["key_rate"]) == ("10/m", "2/s")
    # null clears an operator's value
    assert patch(alice, {"rate": None}).json()["flow"]["rate"] is None


@pytest.mark.parametrize(("body", "field"), [
    ({"rate": "ten a second"}, "rate"),
    ({"rate": "0/s"}, "rate"),
    ({"concurrency": 0}, "concurrency"),
    ({"key_concurrency": 1.5}, "key_concurrency"),
])
def test_bad_limits_are_refused_by_field(alice: Member, body: dict, field: str) -> None:
    response = patch(alice, body)
    assert response.status_code == 400
    assert field in str(response.json())


def test_the_lambda_shows_its_held_tasks_and_busiest_keys(alice: Member) -> None:
    patch(alice, {"key_concurrency": 1})
    directory.clear()
    hold_one(alice)
    flow = alice.client.get(f"/api/v1/lambdas/{alice.lam.name}/").json()["flow"]
    assert flow["held"] == 1
    assert flow["busiest_keys"] == [{"key": "m-1", "running": 1, "held": 1}]


def test_tasks_take_limit_key_and_debounce(alice: Member) -> None:
    first = schedule(alice, payload={"n": 1}, debounce=30, debounce_key="d")
    second = schedule(alice, payload={"n": 2}, debounce=30, debounce_key="d")
    assert (first.status_code, second.status_code) == (201, 200)
    assert first.json()["id"] == second.json()["id"]
    assert TaskEntity.objects.get(pk=first.json()["id"]).payload == {"n": 2}
    bad = schedule(alice, debounce=30)
    assert bad.status_code == 400
    assert "debounce_key" in str(bad.json())
    keyed = schedule(alice, limit_key="m-7")
    assert TaskEntity.objects.get(pk=keyed.json()["id"]).limit_key == "m-7"


def test_metrics_show_limits_held_tasks_and_refused_starts(
        alice: Member, redis_client: object, django_capture_on_commit_callbacks: Any) -> None:
    patch(alice, {"key_concurrency": 1})
    directory.clear()
    with django_capture_on_commit_callbacks(execute=True):
        hold_one(alice)
    text = alice.client.get("/metrics").content.decode()
    assert f'atf_flow_limit{{lambda="{alice.lam.name}",limit="key_concurrency"}} 1.0' in text
    assert f'atf_flow_held{{lambda="{alice.lam.name}"}} 1.0' in text
    assert f'atf_flow_refused_total{{lambda="{alice.lam.name}",limit="key_concurrency"}}' in text


def test_the_schema_documents_the_flow_fields(alice: Member) -> None:
    schema = alice.client.get("/api/schema/?format=json").json()
    components = schema["components"]["schemas"]
    assert {"limit_key", "debounce", "debounce_key"} <= set(
        components["ScheduleTaskRequest"]["properties"])
    assert {"held", "refused", "busiest_keys"} <= set(components["Flow"]["properties"])
    assert "concurrency" in components["PatchedLambdaOverridesRequest"]["properties"]
