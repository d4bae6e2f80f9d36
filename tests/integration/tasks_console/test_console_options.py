"""The console's options page of a lambda: shows values and sources, sets and clears
overrides, refuses bad values with the field's error, and only for the user's teams."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from tasks_core import directory
from tasks_core.models import Lambda, LambdaOverride
from tests.factories import LambdaFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db


def options_url(lam: Lambda) -> str:
    return reverse("admin:tasks_core_lambda_options", args=[lam.pk])


def form(**values: str) -> dict[str, str]:
    """The form as posted: every option's field, empty unless given."""
    return {name: values.get(name, "") for name in
            ("quota", "max_attempts", "heartbeat_timeout", "backoff_base", "backoff_cap",
             "timeout", "concurrency", "rate", "key_concurrency", "key_rate")}


def test_set_an_override_then_clear_it(admin_client: Client) -> None:
    lam = LambdaFactory(name="tests.mailer", max_attempts=3)
    # When quota and max_attempts are typed in and saved
    response = admin_client.post(options_url(lam), form(quota="20", max_attempts="9"))
    # Then they are the operator's, recorded with who changed them
    assert response.status_code == 302
    assert dict(LambdaOverride.objects.values_list("option", "value")) == {
        "quota": 20.0, "max_attempts": 9.0}
    assert set(LambdaOverride.objects.values_list("changed_by", flat=True)) == {"admin"}
    directory.clear()
    assert directory.by_name("tests.mailer").max_attempts == 9
    page = admin_client.get(options_url(lam)).content.decode()
    assert "<td>max_attempts</td><td>9</td><td>operator</td><td>3</td><td>admin</td>" in page
    # And emptying quota clears that override only
    admin_client.post(options_url(lam), form(max_attempts="9"))
    assert list(LambdaOverride.objects.values_list("option", flat=True)) == ["max_attempts"]


def test_a_bad_value_shows_the_fields_error_and_changes_nothing(admin_client: Client) -> None:
    lam = LambdaFactory(name="tests.mailer")
    response = admin_client.post(options_url(lam), form(quota="-1", backoff_cap="60"))
    assert response.status_code == 200
    assert response.context["form"].errors == {
        "quota": ["Give a number above 0 and at most 1e+06."]}
    assert not LambdaOverride.objects.exists()


def test_the_lambda_page_shows_options_and_links_to_the_form(admin_client: Client) -> None:
    lam = LambdaFactory(name="tests.mailer", max_attempts=3)
    admin_client.post(options_url(lam), form(quota="20"))
    page = admin_client.get(reverse("admin:tasks_core_lambda_change", args=[lam.pk]))
    text = page.content.decode()
    assert options_url(lam) in text
    assert "<td>quota</td><td>20</td><td>operator</td>" in text
    listing = admin_client.get(reverse("admin:tasks_core_lambda_changelist")).content.decode()
    assert "<b>quota: 20</b>" in listing and "max_attempts: 3" in listing


def test_another_teams_lambda_has_no_options_page(client: Client) -> None:
    theirs = LambdaFactory(name="search.reindex", team=TeamFactory(name="search"))
    LambdaFactory(name="payments.charge", team=TeamFactory(name="payments"))
    user = UserFactory(is_staff=True)
    TeamFactory(name="payments").members.add(user)
    client.force_login(user)
    assert client.get(options_url(theirs)).status_code == 404
    assert client.post(options_url(theirs), form(quota="1")).status_code == 404
    assert not LambdaOverride.objects.exists()


def test_flow_limits_are_set_shown_as_written_and_what_they_hold_is_shown(
        admin_client: Client) -> None:
    lam = LambdaFactory(name="tests.partner")
    response = admin_client.post(options_url(lam), form(concurrency="3", rate="10/m"))
    assert response.status_code == 302
    page = admin_client.get(options_url(lam)).content.decode()
    assert "<td>rate</td><td>10/m</td><td>operator</td>" in page
    assert "<td>concurrency</td><td>3</td><td>operator</td>" in page
    assert "<th>held now</th><td>0</td>" in page
