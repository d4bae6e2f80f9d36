"""/api/v1/periodic-tasks/: list, create, read, change, enable/disable and delete schedules,
with the same checks as the console (cron, time zone, interval, lambda, priority)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from tasks_core import periodic
from tasks_core.models import PeriodicTask
from tests.integration.tasks_api.test_api_support import Member, member

pytestmark = pytest.mark.django_db

URL = "/api/v1/periodic-tasks/"


@pytest.fixture
def alice() -> Member:
    return member("alpha")


def create(who: Member, **body: Any) -> Any:
    return who.client.post(URL, {"name": "nightly", "lambda": who.lam.name, **body},
                           format="json")


def test_create_read_and_list_a_cron_schedule(alice: Member) -> None:
    response = create(alice, cron="0 3 * * *", timezone="Europe/Paris", payload={"full": True},
                      collection="reports", priority="low", catch_up="skip")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert {key: body[key] for key in ("name", "lambda", "cron", "interval_s", "timezone",
                                       "payload", "collection", "priority", "catch_up",
                                       "enabled", "in_code")} == {
        "name": "nightly", "lambda": "alpha.work", "cron": "0 3 * * *", "interval_s": None,
        "timezone": "Europe/Paris", "payload": {"full": True}, "collection": "reports",
        "priority": "low", "catch_up": "skip", "enabled": True, "in_code": False}
    assert alice.client.get(f"{URL}nightly/").json() == body
    assert [row["name"] for row in alice.client.get(URL).json()] == ["nightly"]


def test_an_interval_schedule_is_materialised_by_the_consumer(alice: Member) -> None:
    assert create(alice, interval_s=60).status_code == 201
    now = timezone.now()
    periodic.materialise_due(now=now)  # the first call computes the next occurrence
    assert periodic.materialise_due(now=now + timedelta(seconds=61)) == 1


@pytest.mark.parametrize(("body", "fields"), [
    ({"cron": "not a cron"}, {"cron"}),
    ({"cron": "*/5 * * * *", "timezone": "Mars/Olympus"}, {"timezone"}),
    ({"interval_s": 0}, {"interval_s"}),
    ({"interval_s": -5}, {"interval_s"}),
    ({"interval_s": 1e300}, {"interval_s"}),
    ({"interval_s": "soon"}, {"interval_s"}),
    ({"cron": "*/5 * * * *", "interval_s": 60}, {"cron", "interval_s"}),
    ({}, {"cron", "interval"}),
    ({"interval": 0}, {"interval"}),
    ({"interval": 60, "interval_s": 60}, {"interval_s"}),  # the old name beside the new
    ({"interval_s": 60, "priority": "urgent"}, {"priority"}),
    ({"interval_s": 60, "lambda": "no.such"}, {"lambda"}),
    ({"interval_s": 60, "catch_up": "always"}, {"catch_up"}),
    ({"interval_s": 60, "colour": "red"}, {"colour"}),
])
def test_a_bad_schedule_is_a_400_naming_the_field(alice: Member, body: dict,
                                                  fields: set[str]) -> None:
    response = create(alice, **body)
    assert response.status_code == 400
    assert set(response.json()) == fields
    assert not PeriodicTask.objects.exists()


def test_interval_is_the_name_and_interval_s_is_still_accepted_with_a_deprecation(
        alice: Member) -> None:
    # Given a schedule made with the new name: no deprecation, both names in the answer
    response = create(alice, interval=60)
    assert response.status_code == 201, response.json()
    assert (response.json()["interval"], response.json()["interval_s"]) == (60, 60)
    assert "Deprecation" not in response
    # When a change uses the old name, then it applies, and the answer says it is deprecated
    response = alice.client.patch(f"{URL}nightly/", {"interval_s": 30}, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["interval"] == 30
    assert response["Deprecation"] == "true"
    assert "interval_s (now interval)" in response["Warning"]


@pytest.mark.parametrize("name", ["nul\x00name", "x" * 201, "", None])
def test_a_bad_name_is_a_400(alice: Member, name: object) -> None:
    response = create(alice, name=name, interval_s=60)
    assert (response.status_code, list(response.json())) == (400, ["name"])


def test_a_taken_name_is_a_400(alice: Member) -> None:
    create(alice, interval_s=60)
    response = create(alice, interval_s=30)
    assert (response.status_code, list(response.json())) == (400, ["name"])


def test_patch_changes_the_timing_and_starts_from_its_next_occurrence(alice: Member) -> None:
    create(alice, interval_s=60)
    PeriodicTask.objects.update(next_run_at=timezone.now())
    response = alice.client.patch(f"{URL}nightly/", {"cron": "*/5 * * * *", "interval_s": None},
                                  format="json")
    assert response.status_code == 200, response.json()
    assert (response.json()["cron"], response.json()["interval_s"]) == ("*/5 * * * *", None)
    assert PeriodicTask.objects.get().next_run_at is None


def test_patch_with_a_bad_cron_is_a_400_and_changes_nothing(alice: Member) -> None:
    create(alice, cron="0 3 * * *")
    response = alice.client.patch(f"{URL}nightly/", {"cron": "every day"}, format="json")
    assert (response.status_code, list(response.json())) == (400, ["cron"])
    assert PeriodicTask.objects.get().cron == "0 3 * * *"


def test_disable_and_enable(alice: Member) -> None:
    create(alice, interval_s=60)
    response = alice.client.patch(f"{URL}nightly/", {"enabled": False}, format="json")
    assert (response.status_code, response.json()["enabled"]) == (200, False)
    assert periodic.materialise_due(now=timezone.now() + timedelta(days=1)) == 0
    assert alice.client.patch(f"{URL}nightly/", {"enabled": True},
                              format="json").json()["enabled"] is True


def test_the_name_cannot_change(alice: Member) -> None:
    create(alice, interval_s=60)
    response = alice.client.patch(f"{URL}nightly/", {"name": "daily"}, format="json")
    assert (response.status_code, list(response.json())) == (400, ["name"])


def test_delete(alice: Member) -> None:
    create(alice, interval_s=60)
    assert alice.client.delete(f"{URL}nightly/").status_code == 204
    assert not PeriodicTask.objects.exists()
    assert alice.client.get(f"{URL}nightly/").status_code == 404


def test_a_schedule_defined_in_code_is_read_only(alice: Member) -> None:
    PeriodicTask.objects.create(name="demo.noop@*/5 * * * *", lambda_ref=alice.lam,
                                cron="*/5 * * * *", in_code=True)
    url = f"{URL}demo.noop@*%2F5%20*%20*%20*%20*/"
    assert alice.client.get(url).json()["in_code"] is True
    assert alice.client.patch(url, {"enabled": False}, format="json").status_code == 409
    assert alice.client.delete(url).status_code == 409
    assert PeriodicTask.objects.get().enabled is True


def test_another_teams_schedules_are_invisible_and_its_lambdas_refused(alice: Member) -> None:
    create(alice, interval_s=60)
    bob = member("beta")
    assert bob.client.get(URL).json() == []
    assert bob.client.get(f"{URL}nightly/").status_code == 404
    assert bob.client.patch(f"{URL}nightly/", {"enabled": False},
                            format="json").status_code == 404
    assert bob.client.delete(f"{URL}nightly/").status_code == 404
    response = bob.client.post(URL, {"name": "theirs", "lambda": alice.lam.name,
                                     "interval_s": 60}, format="json")
    assert response.status_code == 400
    response = bob.client.patch(f"{URL}nightly/", {"lambda": bob.lam.name}, format="json")
    assert response.status_code == 404
    created = create(bob, name="mine", interval_s=60)
    assert created.status_code == 201
    response = bob.client.patch(f"{URL}mine/", {"lambda": alice.lam.name}, format="json")
    assert response.status_code == 400
    assert PeriodicTask.objects.get(name="mine").lambda_ref_id == bob.lam.pk


def test_names_belong_to_a_team_and_tell_nothing_of_another(alice: Member) -> None:
    # Given team beta's schedule "beta-nightly-payroll"
    bob = member("beta")
    assert create(bob, name="beta-nightly-payroll", interval_s=60).status_code == 201
    # When alpha creates one of the same name
    response = create(alice, name="beta-nightly-payroll", interval_s=3600)
    # Then it is created (nothing says beta has one), and each team sees its own
    assert response.status_code == 201, response.json()
    assert response.json()["team"] == "alpha"
    assert [r["interval_s"] for r in alice.client.get(URL).json()] == [3600]
    assert [r["interval_s"] for r in bob.client.get(URL).json()] == [60]
    # And a member of both names the team when the name is in both
    alice.team.members.add(bob.user)
    both = bob.client.get(f"{URL}beta-nightly-payroll/")
    assert (both.status_code, list(both.json())) == (400, ["team"])
    mine = bob.client.get(f"{URL}beta-nightly-payroll/?team=beta")
    assert (mine.status_code, mine.json()["interval_s"]) == (200, 60)


def test_a_team_adds_a_bounded_number_of_schedules(alice: Member, settings: Any) -> None:
    # Given a limit of two schedules a team, which alpha has
    settings.ATF_MAX_PERIODIC_TASKS_PER_TEAM = 2
    assert create(alice, name="one", interval_s=60).status_code == 201
    assert create(alice, name="two", interval_s=60).status_code == 201
    # When alpha adds a third
    response = create(alice, name="three", interval_s=60)
    # Then it is refused with a 429 naming the limit, and another team still adds its own
    assert response.status_code == 429
    assert "ATF_MAX_PERIODIC_TASKS_PER_TEAM" in response.json()["detail"]
    assert not PeriodicTask.objects.filter(name="three").exists()
    assert create(member("beta"), name="three", interval_s=60).status_code == 201


def test_the_endpoints_need_credentials(alice: Member) -> None:
    alice.client.credentials()
    assert alice.client.get(URL).status_code == 401
    assert create(alice, interval_s=60).status_code == 401
