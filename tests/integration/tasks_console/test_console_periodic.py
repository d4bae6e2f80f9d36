"""The console's periodic-task form runs the API's checks (tasks_core.periodic.check_row): what
the API refuses, the form refuses with a field error, and nothing is saved."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client, override_settings
from django.urls import reverse

from tasks_core.models import Lambda, PeriodicTask
from tests.factories import LambdaFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db

ADD = reverse("admin:tasks_core_periodictask_add")


@pytest.fixture
def lam() -> Lambda:
    return LambdaFactory(name="payments.report", team=TeamFactory(name="payments"))


@pytest.fixture
def member(client: Client, lam: Lambda) -> Client:
    user = UserFactory(is_staff=True)
    lam.team.members.add(user)
    client.force_login(user)
    return client


def form(lam: Lambda, **fields: Any) -> dict[str, Any]:
    """A valid add form, with `fields` changed."""
    return {"name": "nightly", "lambda_ref": str(lam.pk), "cron": "", "interval_s": "300",
            "timezone": "UTC", "payload": "{}", "collection": "default",
            "priority": "default", "catch_up": "once", "enabled": "on", **fields}


def errors(response: Any) -> dict[str, list[str]]:
    adminform = response.context["adminform"].form
    return {name: list(messages) for name, messages in adminform.errors.items()}


@pytest.mark.parametrize(("fields", "field"), [
    ({"interval_s": "-5"}, "interval_s"),
    ({"interval_s": "0.5"}, "interval_s"),
    ({"cron": "not a cron", "interval_s": ""}, "cron"),
    ({"cron": "*/5 * * * *"}, "cron"),  # and an interval
    ({"cron": "", "interval_s": ""}, "cron"),  # neither
    ({"timezone": "Mars/Olympus"}, "timezone"),
    ({"priority": "urgent"}, "priority"),
    ({"payload": json.dumps({"k": "\u0000"})}, "payload"),
    ({"payload": json.dumps({"k\u0000": 1})}, "payload"),
    ({"payload": "[" * 150 + "]" * 150}, "payload"),
    ({"collection": "c" * 101}, "collection"),
])
def test_the_form_refuses_what_the_api_refuses(member: Client, lam: Lambda,
                                               fields: dict[str, str], field: str) -> None:
    # When a team member saves a periodic task with a bad field
    response = member.post(ADD, form(lam, **fields))
    # Then the form comes back with an error on that field, and nothing is saved
    assert response.status_code == 200
    assert field in errors(response), errors(response)
    assert not PeriodicTask.objects.exists()


@override_settings(ATF_MAX_PAYLOAD_BYTES=100)
def test_the_form_refuses_an_oversize_payload(member: Client, lam: Lambda) -> None:
    response = member.post(ADD, form(lam, payload=json.dumps({"k": "x" * 200})))
    assert response.status_code == 200
    assert "limit is 100" in errors(response)["payload"][0]
    assert not PeriodicTask.objects.exists()


def test_a_valid_schedule_is_saved(member: Client, lam: Lambda) -> None:
    response = member.post(ADD, form(lam, payload=json.dumps({"report": "daily"})))
    assert response.status_code == 302, errors(response)
    row = PeriodicTask.objects.get(name="nightly")
    assert (row.interval_s, row.payload, row.in_code) == (300.0, {"report": "daily"}, False)


def test_a_changed_timing_starts_from_its_next_occurrence(member: Client, lam: Lambda) -> None:
    # Given a saved schedule whose next run was computed for its old timing
    member.post(ADD, form(lam))
    row = PeriodicTask.objects.get(name="nightly")
    PeriodicTask.objects.filter(pk=row.pk).update(next_run_at="2030-01-01T00:00:00Z")
    # When its interval is changed in the console
    change = reverse("admin:tasks_core_periodictask_change", args=[row.pk])
    response = member.post(change, form(lam, interval_s="3600"))
    # Then the next run is computed again from the new timing
    assert response.status_code == 302, errors(response)
    row.refresh_from_db()
    assert (row.interval_s, row.next_run_at) == (3600.0, None)
