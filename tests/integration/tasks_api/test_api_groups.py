"""POST/GET /api/v1/groups/: a group scheduled all or none, followed, scoped to its team."""

from __future__ import annotations

import pytest

from tasks_core.models import TaskEntity, TaskGroup
from tests.integration.tasks_api.test_api_support import Member, member

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice() -> Member:
    return member("alpha")


def _post(who: Member, body: object) -> object:
    return who.client.post("/api/v1/groups/", body, format="json")


def test_a_group_is_scheduled_and_read_back_with_its_counts(alice: Member) -> None:
    name = alice.lam.name
    response = _post(alice, {"tasks": [{"lambda": name, "payload": {"n": n}} for n in range(3)],
                             "then": {"lambda": name}, "on_failure": {"lambda": name}})
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["status"], body["total"], len(body["tasks"])) == ("running", 3, 3)
    assert TaskEntity.objects.get(pk=body["then"]).status == "waiting"
    read = alice.client.get(f"/api/v1/groups/{body['id']}/").json()
    assert read["counts"] == {"new": 3} and read["tasks"] == body["tasks"]


def test_bad_members_are_field_errors_and_nothing_is_created(alice: Member) -> None:
    response = _post(alice, {"tasks": [{"lambda": alice.lam.name}, {"lambda": "nope.x"}],
                             "then": {"lambda": alice.lam.name, "priority": "urgent!"}})
    assert response.status_code == 400
    errors = response.json()
    assert "tasks[1].lambda" in errors and "then.priority" in errors
    assert not TaskEntity.objects.exists() and not TaskGroup.objects.exists()
    for bad in ({"tasks": []}, {"tasks": "x"}, [], {"tasks": [{}], "extra": 1}):
        assert _post(alice, bad).status_code == 400


def test_another_teams_group_is_not_found(alice: Member) -> None:
    bob = member("beta")
    created = _post(alice, {"tasks": [{"lambda": alice.lam.name}]}).json()
    assert bob.client.get(f"/api/v1/groups/{created['id']}/").status_code == 404
    # ...nor may bob put alice's lambda in a group of his
    response = _post(bob, {"tasks": [{"lambda": alice.lam.name}]})
    assert response.status_code == 400 and "tasks[0].lambda" in response.json()


def test_a_chain_member_is_scheduled_as_its_steps_and_shown_as_its_last(alice: Member) -> None:
    name = alice.lam.name
    response = _post(alice, {"tasks": [{"lambda": name},
                                       {"chain": [{"lambda": name, "payload": {"step": 1}},
                                                  {"lambda": name, "payload": {"step": 2}}]}],
                             "then": {"lambda": name}})
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["total"] == 2 and len(body["tasks"]) == 2
    last = TaskEntity.objects.get(pk=body["tasks"][1])
    assert last.payload == {"step": 2} and last.status == "waiting"
    assert [p.payload for p in last.parents.all()] == [{"step": 1}]


def test_a_bad_chain_member_is_a_field_error(alice: Member) -> None:
    name = alice.lam.name
    for chain, error in (([], "tasks[0].chain"),
                         ([{"lambda": name}, {"lambda": "nope.x"}], "tasks[0].chain[1].lambda"),
                         ([{"lambda": name, "idempotency_key": "k"}],
                          "tasks[0].chain[0].idempotency_key")):
        response = _post(alice, {"tasks": [{"chain": chain}]})
        assert response.status_code == 400 and error in response.json(), response.json()
    assert not TaskEntity.objects.exists() and not TaskGroup.objects.exists()


def test_a_keyed_member_is_the_existing_task(alice: Member) -> None:
    name = alice.lam.name
    earlier = alice.client.post("/api/v1/tasks/", {"lambda": name, "idempotency_key": "k"},
                                format="json").json()
    response = _post(alice, {"tasks": [{"lambda": name},
                                       {"lambda": name, "idempotency_key": "k"}]})
    assert response.status_code == 201, response.json()
    assert response.json()["tasks"][1] == earlier["id"]
    # A task belongs to one group only: another group naming it is refused, naming it
    again = _post(alice, {"tasks": [{"lambda": name, "idempotency_key": "k"}]})
    assert again.status_code == 400
    assert "already a member of group" in again.json()["tasks[0].idempotency_key"][0]


def test_a_groups_key_answers_the_first_group_again(alice: Member) -> None:
    body = {"tasks": [{"lambda": alice.lam.name}], "idempotency_key": "album-1"}
    first = _post(alice, body)
    again = _post(alice, body)
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    assert again.json()["idempotency_key"] == "album-1" and TaskEntity.objects.count() == 1
    assert "idempotency_key" in _post(alice, {**body, "idempotency_key": ""}).json()
