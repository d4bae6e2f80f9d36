"""PATCH /api/v1/lambdas/{name}/: operator overrides, shown with their source on every read."""

from __future__ import annotations

import pytest

from tasks_core import directory, lambda_sync
from tasks_core.models import LambdaOverride
from tests.integration.tasks_api.test_api_support import Member, member

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice() -> Member:
    return member("alpha")


def patch(who: Member, body: object, name: str | None = None) -> object:
    return who.client.patch(f"/api/v1/lambdas/{name or who.lam.name}/", body, format="json")


def test_a_patch_sets_overrides_and_answers_each_option_with_its_source(alice: Member) -> None:
    # When the team sets a quota and max_attempts
    response = patch(alice, {"quota": 20, "max_attempts": 9, "timeout": 45})
    # Then the lambda comes back with each option's value and where it comes from
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["quota"]["value"] == 20
    assert (body["quota"]["source"], body["quota"]["code_value"]) == ("operator", None)
    assert body["quota"]["changed_by"] == "alpha-user" and body["quota"]["changed_at"]
    assert body["max_attempts"]["value"] == 9
    assert (body["timeout"]["value"], body["timeout"]["code_value"]) == (45.0, None)
    assert body["heartbeat_timeout"] == {"value": 30.0, "source": "code", "code_value": 30.0}
    # And reads show the same, and the workers' directory holds the operator's values
    assert alice.client.get(f"/api/v1/lambdas/{alice.lam.name}/").json()["quota"] == \
        body["quota"]
    assert alice.client.get("/api/v1/lambdas/").json()[0]["max_attempts"]["source"] == \
        "operator"
    directory.clear()
    assert (directory.by_name(alice.lam.name).quota_per_s,
            directory.by_name(alice.lam.name).max_attempts) == (20.0, 9)


def test_null_clears_an_override_and_the_codes_value_applies_again(alice: Member) -> None:
    patch(alice, {"quota": 20, "backoff_cap": 60})
    body = patch(alice, {"quota": None}).json()
    assert body["quota"] == {"value": None, "source": "code", "code_value": None}
    assert body["backoff_cap"]["source"] == "operator"
    assert list(LambdaOverride.objects.values_list("option", flat=True)) == ["backoff_cap"]


def test_an_override_survives_a_code_sync(alice: Member) -> None:
    patch(alice, {"max_attempts": 9})
    lambda_sync.sync_to_store()
    body = alice.client.get(f"/api/v1/lambdas/{alice.lam.name}/").json()
    assert (body["max_attempts"]["value"], body["max_attempts"]["source"]) == (9, "operator")


@pytest.mark.parametrize(("body", "field"), [
    ({"quota": 0}, "quota"),
    ({"quota": -3}, "quota"),
    ({"quota": "lots"}, "quota"),
    ({"quota": True}, "quota"),
    ({"quota": [1]}, "quota"),
    ({"max_attempts": 0}, "max_attempts"),
    ({"max_attempts": 1.5}, "max_attempts"),
    ({"heartbeat_timeout": 1}, "heartbeat_timeout"),
    ({"backoff_base": -1}, "backoff_base"),
    ({"backoff_cap": 0}, "backoff_cap"),
    ({"timeout": -1}, "timeout"),
    ({"speed": 1}, "speed"),
])
def test_a_bad_value_is_a_400_naming_the_field_and_changes_nothing(alice: Member, body: dict,
                                                                   field: str) -> None:
    response = patch(alice, {"backoff_cap": 60, **body})
    assert response.status_code == 400
    assert list(response.json()) == [field]
    assert not LambdaOverride.objects.exists()


def test_a_body_that_is_not_an_object_is_a_400(alice: Member) -> None:
    assert patch(alice, [1, 2]).status_code == 400


def test_another_teams_lambda_is_not_found_and_unchanged(alice: Member) -> None:
    bob = member("beta")
    assert patch(bob, {"quota": 1}, name=alice.lam.name).status_code == 404
    assert not LambdaOverride.objects.exists()


def test_a_patch_needs_credentials(alice: Member) -> None:
    alice.client.credentials()
    assert patch(alice, {"quota": 1}).status_code == 401
    assert not LambdaOverride.objects.exists()
