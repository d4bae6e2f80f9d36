"""API tokens: stored hashed, shown once, listed, named, expired and revoked per team; scopes."""

from __future__ import annotations

import hashlib
import importlib
import io
import subprocess
import sys
from datetime import timedelta

import pytest
from django.apps import apps
from django.core.management import call_command
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from tasks_api import token_cache
from tasks_api.models import ApiToken, Scope
from tests.conftest import ROOT, subprocess_env
from tests.integration.tasks_api.test_api_access import ENDPOINTS
from tests.integration.tasks_api.test_api_support import Member, token_client

pytestmark = pytest.mark.django_db




def client_with(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client


def atf_token(*args: str) -> str:
    out = io.StringIO()
    call_command("atf_token", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue().strip().splitlines()[-1]


def test_only_a_hash_and_a_prefix_of_a_token_are_stored() -> None:
    # When a token is made
    token = atf_token("ops", "carol")
    # Then no column holds it; its digest and first characters do
    row = ApiToken.objects.get()
    assert row.digest == hashlib.sha256(token.encode()).hexdigest()
    assert token.startswith(row.prefix) and len(row.prefix) < len(token) // 2
    stored = [str(v) for v in ApiToken.objects.values_list(*[f.attname for f in
                                                             ApiToken._meta.fields]).get()]
    assert not any(token in value for value in stored)
    assert (row.scope, row.team.name, row.user.username) == ("full", "ops", "carol")


def test_expired_and_revoked_tokens_are_refused(alice: Member) -> None:
    # Given a token that works
    assert alice.client.get("/api/v1/lambdas/").status_code == 200
    row = ApiToken.objects.get(user=alice.user)
    # When it expires, it answers 401 (once the server's memory of the token has lapsed:
    # an update() is a change made elsewhere, see test_api_token_cache.py)
    ApiToken.objects.filter(pk=row.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    token_cache.forget_all()
    assert alice.client.get("/api/v1/lambdas/").status_code == 401
    # And when it is revoked (no longer expired), also 401
    ApiToken.objects.filter(pk=row.pk).update(expires_at=None, revoked_at=timezone.now())
    token_cache.forget_all()
    response = alice.client.get("/api/v1/lambdas/")
    assert response.status_code == 401
    assert response.json() == {"detail": "Token revoked or expired."}


def test_a_token_records_when_it_was_last_used(alice: Member) -> None:
    assert ApiToken.objects.get(user=alice.user).last_used_at is None
    alice.client.get("/api/v1/lambdas/")
    assert ApiToken.objects.get(user=alice.user).last_used_at is not None


def test_create_shows_the_token_once_and_it_works(alice: Member) -> None:
    # When a member creates a named token that expires
    until = (timezone.now() + timedelta(days=3)).isoformat()
    response = alice.client.post("/api/v1/tokens/", {"name": "ci", "expires_at": until},
                                 format="json")
    # Then the answer carries the token, which works
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["name"], body["team"], body["user"], body["scope"], body["active"]) == (
        "ci", "alpha", "alpha-user", "full", True)
    assert client_with(body["token"]).get("/api/v1/tasks/").status_code == 200
    # And neither the list nor the detail shows it again
    listed = alice.client.get("/api/v1/tokens/").json()
    assert {t["name"] for t in listed} == {"test", "ci"}
    assert all("token" not in t for t in listed)
    detail = alice.client.get(f"/api/v1/tokens/{body['id']}/").json()
    assert "token" not in detail and detail["prefix"] == body["token"][:len(detail["prefix"])]


def test_revoke_through_the_api(alice: Member) -> None:
    # Given a second token of the team
    made = alice.client.post("/api/v1/tokens/", {"name": "laptop"}, format="json").json()
    other = client_with(made["token"])
    # When it is revoked
    response = alice.client.post(f"/api/v1/tokens/{made['id']}/revoke/")
    # Then it is shown revoked and no longer works; the first token still does
    assert response.status_code == 200
    assert response.json()["active"] is False and response.json()["revoked_at"]
    assert other.get("/api/v1/lambdas/").status_code == 401
    assert alice.client.get("/api/v1/lambdas/").status_code == 200


def test_another_teams_tokens_are_not_seen_nor_revoked(alice: Member, bob: Member) -> None:
    bobs = ApiToken.objects.get(user=bob.user)
    assert [t["user"] for t in alice.client.get("/api/v1/tokens/").json()] == ["alpha-user"]
    assert alice.client.get(f"/api/v1/tokens/{bobs.pk}/").status_code == 404
    assert alice.client.post(f"/api/v1/tokens/{bobs.pk}/revoke/").status_code == 404
    assert ApiToken.objects.get(pk=bobs.pk).revoked_at is None
    # Nor can a token be made for a team one is not in
    response = alice.client.post("/api/v1/tokens/", {"name": "x", "team": "beta"}, format="json")
    assert response.status_code == 400 and "team" in response.json()


def test_a_team_sees_and_revokes_every_token_that_can_act_on_it(alice: Member,
                                                                bob: Member) -> None:
    # Given bob, who joins alice's team with a full token he made under his own team
    alice.team.members.add(bob.user)
    bobs = ApiToken.objects.get(user=bob.user)
    assert bob.client.get(f"/api/v1/tasks/?lambda={alice.lam.name}").status_code == 200
    # Then alice's team lists that token (it acts on the team) and may revoke it
    listed = {t["id"]: t["team"] for t in alice.client.get("/api/v1/tokens/").json()}
    assert listed[bobs.pk] == "beta"
    assert alice.client.post(f"/api/v1/tokens/{bobs.pk}/revoke/").status_code == 200
    assert bob.client.get("/api/v1/lambdas/").status_code == 401


@pytest.mark.parametrize(("body", "field"), [
    ({}, "name"),
    ({"name": "a\x00b"}, "name"),
    ({"name": "x", "scope": "root"}, "scope"),
    ({"name": "x", "expires_at": "2001-01-01T00:00:00Z"}, "expires_at"),
    ({"name": "x", "color": "red"}, "color"),
])
def test_bad_token_requests_name_the_field(alice: Member, body: dict, field: str) -> None:
    response = alice.client.post("/api/v1/tokens/", body, format="json")
    assert response.status_code == 400 and field in response.json(), response.json()


def test_a_member_of_two_teams_names_the_team(alice: Member, bob: Member) -> None:
    bob.team.members.add(alice.user)
    unnamed = alice.client.post("/api/v1/tokens/", {"name": "x"}, format="json")
    assert unnamed.status_code == 400 and "team" in unnamed.json()
    named = alice.client.post("/api/v1/tokens/", {"name": "x", "team": "beta"}, format="json")
    assert named.status_code == 201 and named.json()["team"] == "beta"


@pytest.mark.parametrize(("method", "path"), [*ENDPOINTS, ("get", "/api/v1/tokens/"),
                                              ("post", "/api/v1/tokens/")])
def test_a_worker_token_is_refused_everywhere_else(alice: Member, method: str,
                                                   path: str) -> None:
    # Given a worker-scoped token of alice's team
    client = token_client(alice.user, alice.team, scope=Scope.WORKER)
    # When it calls any endpoint that is not a worker call
    response = getattr(client, method)(path, {}, format="json")
    # Then it is refused with a JSON 403
    assert response.status_code == 403, (path, response.content[:200])
    assert response["Content-Type"].startswith("application/json")


def test_atf_token_worker_makes_a_worker_token() -> None:
    token = atf_token("ops", "runner", "--worker", "--name", "host-1")
    row = ApiToken.objects.get(name="host-1")
    assert (row.scope, row.team.name) == (Scope.WORKER, "ops")
    assert client_with(token).get("/api/v1/tasks/").status_code == 403


def test_atf_token_expires_days() -> None:
    atf_token("ops", "carol", "--expires-days", "2")
    row = ApiToken.objects.get()
    assert timedelta(days=1.9) < row.expires_at - timezone.now() < timedelta(days=2.1)


@pytest.mark.parametrize("args", [["--expires-days", "-1"], ["--expires-days", "soon"],
                                  ["--name", ""]])
def test_atf_token_bad_options_are_one_line_errors(args: list[str]) -> None:
    result = subprocess.run([sys.executable, "manage.py", "atf_token", "ops", "carol", *args],
                            cwd=ROOT, env=subprocess_env(), capture_output=True, text=True,
                            timeout=60)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert "error: argument" in result.stderr.strip().splitlines()[-1]
    assert not ApiToken.objects.exists()


def test_drf_tokens_are_migrated_hashed_and_keep_working(alice: Member) -> None:
    # Given a token of DRF's authtoken table (as installations before hashed tokens had)
    key = "0123456789abcdef0123456789abcdef01234567"
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE authtoken_token (key varchar(40) PRIMARY KEY, "
                       "user_id integer NOT NULL, created timestamp with time zone NOT NULL)")
        cursor.execute("INSERT INTO authtoken_token VALUES (%s, %s, now())",
                       [key, alice.user.pk])
    # When the data migration runs
    migration = importlib.import_module("tasks_api.migrations.0002_hash_drf_tokens")
    migration.hash_drf_tokens(apps, connection.schema_editor())
    # Then the old key works, in alice's team, and DRF's table no longer holds it
    assert client_with(key).get("/api/v1/lambdas/").status_code == 200
    row = ApiToken.objects.get(prefix=key[:8])
    assert (row.team, row.scope, row.digest) == (alice.team, Scope.FULL,
                                                 hashlib.sha256(key.encode()).hexdigest())
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM authtoken_token")
        assert cursor.fetchone() == (0,)


def test_tokens_are_in_the_schema(alice: Member) -> None:
    paths = alice.client.get("/api/schema/?format=json").json()["paths"]
    assert {"/api/v1/tokens/", "/api/v1/tokens/{id}/", "/api/v1/tokens/{id}/revoke/"} <= set(paths)
