"""Helpers shared by the API tests: teams with members and token clients (no tests here)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser
from rest_framework.test import APIClient

from tasks_api import tokens
from tasks_api.models import Scope
from tasks_core.models import Lambda, Team
from tests.factories import LambdaFactory, TeamFactory

#: Times no request may give: year 10000 or year 0 in UTC (in range at their offsets), before
#: 2000, after 9998 (tasks_core.limits.EARLIEST_TIME, LATEST_TIME).
BAD_TIMES = ["9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00+14:00", "1999-12-31T23:59:59Z",
             "9999-06-01T00:00:00Z"]
#: Text the database cannot store: NUL characters, lone surrogates.
BAD_TEXTS = ["nul \x00", "\ud800", "x\udfff"]


@dataclass(frozen=True, kw_only=True)
class Member:
    """A user of one team, its token, a client sending that token, and a lambda the team owns."""

    team: Team
    user: AbstractUser
    token: str
    client: APIClient
    lam: Lambda


def new_token(user: AbstractUser, team: Team | None = None, *,
              scope: Scope = Scope.FULL) -> str:
    return tokens.issue(user=user, team=team, name="test", scope=scope).token


def token_client(user: AbstractUser, team: Team | None = None, *,
                 scope: Scope = Scope.FULL) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {new_token(user, team, scope=scope)}")
    return client


def member(team_name: str, *, lambda_name: str | None = None, **user: Any) -> Member:
    team = TeamFactory(name=team_name)
    # Not UserFactory: hashing its password costs a second per test on a busy machine.
    person, _created = get_user_model().objects.get_or_create(username=f"{team_name}-user",
                                                               defaults=user)
    team.members.add(person)
    lam = LambdaFactory(name=lambda_name or f"{team_name}.work", team=team)
    token = new_token(person, team)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return Member(team=team, user=person, token=token, client=client, lam=lam)


def schedule(who: Member, **body: Any) -> Any:
    """POST a task of `who`'s lambda (unless body names another) and return the response."""
    return who.client.post("/api/v1/tasks/", {"lambda": who.lam.name, **body}, format="json")
