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
