"""API tokens in the console: made for one's teams (shown once), listed by prefix, revoked."""

from __future__ import annotations

import hashlib
import re

import pytest
from django.test import Client
from django.urls import reverse

from tasks_api.models import ApiToken
from tasks_core import limits
from tests.factories import TeamFactory
from tests.integration.tasks_api.test_api_support import member, new_token
from tests.integration.tasks_console.test_console_permissions import staff_of

pytestmark = pytest.mark.django_db

TOKENS = reverse("admin:tasks_api_apitoken_changelist")
ADD = reverse("admin:tasks_api_apitoken_add")


def test_a_token_made_in_the_console_is_shown_once_and_stored_hashed(client: Client) -> None:
    # Given a staff member of team "payments"
    user = staff_of("payments")
    client.force_login(user)
    team = user.atf_teams.get()
    # When they add a worker token for their team
    response = client.post(ADD, {"name": "host-1", "team": team.pk, "scope": "worker"},
                           follow=True)
    # Then the page shows the token once, and only its digest is stored
    shown = re.search(r"atf_[A-Za-z0-9_-]{40}", response.content.decode())
    assert shown, response.content.decode()[:2000]
    row = ApiToken.objects.get(name="host-1")
    assert (row.user, row.team, row.scope) == (user, team, "worker")
    assert row.digest == hashlib.sha256(shown.group(0).encode()).hexdigest()
    assert shown.group(0) not in client.get(TOKENS).content.decode()


def test_tokens_of_other_teams_are_neither_listed_nor_made_nor_revoked(client: Client) -> None:
    # Given a staff member of "payments" and a token of team "search"
    client.force_login(staff_of("payments"))
    search = member("search")
    theirs = ApiToken.objects.get(user=search.user)
    elsewhere = ApiToken.objects.create(name="elsewhere", team=TeamFactory(name="payments2"),
                                   user=search.user, prefix="x", digest="0" * 64)
    # Then the list does not show it
    assert {r.pk for r in client.get(TOKENS).context["cl"].result_list} == set()
    # Nor can a token be made for "search"
    response = client.post(ADD, {"name": "sneaky", "team": search.team.pk, "scope": "full"})
    assert response.status_code == 200 and not ApiToken.objects.filter(name="sneaky").exists()
    # Nor revoked
    client.post(TOKENS, {"action": "revoke", "index": "0",
                         "_selected_action": [str(theirs.pk), str(elsewhere.pk)]})
    assert ApiToken.objects.filter(revoked_at__isnull=False).count() == 0


def test_revoking_in_the_console_stops_the_token(client: Client) -> None:
    # Given a staff member of "payments" and a working token of the team
    user = staff_of("payments")
    token = new_token(user, user.atf_teams.get())
    api = Client(HTTP_AUTHORIZATION=f"Token {token}")
    assert api.get("/api/v1/lambdas/").status_code == 200
    # When the token is revoked in the console
    client.force_login(user)
    row = ApiToken.objects.get(user=user)
    client.post(TOKENS, {"action": "revoke", "index": "0", "_selected_action": [str(row.pk)]})
    # Then it no longer works
    assert ApiToken.objects.get(pk=row.pk).revoked_at is not None
    assert api.get("/api/v1/lambdas/").status_code == 401


@pytest.mark.parametrize("day", ["9999-06-01", "1999-12-31"])
def test_a_token_expiry_out_of_range_is_a_form_error(client: Client, day: str) -> None:
    # Given a staff member of team "payments"
    user = staff_of("payments")
    client.force_login(user)
    # When they add a token that expires before 2000 or after 9998
    response = client.post(ADD, {"name": "far", "team": user.atf_teams.get().pk,
                                 "scope": "full", "expires_at_0": day,
                                 "expires_at_1": "00:00:00"})
    # Then the form says why, and no token is made
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["expires_at"] == [
        limits.TIME_OUT_OF_RANGE]
    assert not ApiToken.objects.filter(name="far").exists()


def test_a_new_token_is_shown_in_the_posts_own_answer_never_in_a_cookie_or_the_session(
        client: Client) -> None:
    # Given a staff member of team "payments"
    user = staff_of("payments")
    client.force_login(user)
    # When they add a token (the answer not followed anywhere)
    response = client.post(ADD, {"name": "host-2", "team": user.atf_teams.get().pk,
                                 "scope": "worker"})
    # Then that answer is the page that shows it, and is not to be stored
    assert response.status_code == 200
    shown = re.search(r"atf_[A-Za-z0-9_-]{40}", response.content.decode())
    assert shown, response.content.decode()[:2000]
    assert "no-store" in response["Cache-Control"]
    # And it is in no cookie (the messages cookie included) and not in the session
    token = shown.group(0)
    assert all(token not in morsel.value for morsel in response.cookies.values())
    assert all(token not in morsel.value for morsel in client.cookies.values())
    assert token not in str(dict(client.session.items()))
    assert token not in client.get(TOKENS).content.decode()


@pytest.mark.parametrize(("body", "field"), [
    ({"name": "tab\there"}, "name"),
    ({"name": "nul\x00here"}, "name"),
    ({"expires_at_0": "2001-01-01", "expires_at_1": "00:00:00"}, "expires_at"),
])
def test_the_console_refuses_the_names_and_expiries_the_api_refuses(
        client: Client, body: dict[str, str], field: str) -> None:
    # Given a staff member of team "payments"
    user = staff_of("payments")
    client.force_login(user)
    team = user.atf_teams.get()
    # The API refuses it
    api = Client(HTTP_AUTHORIZATION=f"Token {new_token(user, team)}")
    api_body = {"name": "fine", "expires_at": "2001-01-01T00:00:00Z"} if field == "expires_at" \
        else body
    refused = api.post("/api/v1/tokens/", api_body, content_type="application/json")
    assert refused.status_code == 400 and field in refused.json(), refused.json()
    # When the console's form is sent the same
    made = ApiToken.objects.count()
    response = client.post(ADD, {"name": "fine", "team": team.pk, "scope": "full", **body})
    # Then it is refused on that field, and no token is made
    assert response.status_code == 200
    assert response.context["adminform"].form.errors.get(field), response.context[
        "adminform"].form.errors
    assert ApiToken.objects.count() == made
