"""Helpers shared by the API tests: teams with members and token clients (no tests here)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tasks_core.models import Lambda, Team
from tests.factories import LambdaFactory, TeamFactory


@dataclass(frozen=True, kw_only=True)
class Member:
    """A user of one team, its token client, and a lambda the team owns."""

    team: Team
    user: AbstractUser
    client: APIClient
    lam: Lambda


def token_client(user: AbstractUser) -> APIClient:
    token, _created = Token.objects.get_or_create(user=user)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


def member(team_name: str, *, lambda_name: str | None = None, **user: Any) -> Member:
    team = TeamFactory(name=team_name)
    # Not UserFactory: hashing its password costs a second per test on a busy machine.
    person, _created = get_user_model().objects.get_or_create(username=f"{team_name}-user",
                                                               defaults=user)
    team.members.add(person)
    lam = LambdaFactory(name=lambda_name or f"{team_name}.work", team=team)
    return Member(team=team, user=person, client=token_client(person), lam=lam)


def schedule(who: Member, **body: Any) -> Any:
    """POST a task of `who`'s lambda (unless body names another) and return the response."""
    return who.client.post("/api/v1/tasks/", {"lambda": who.lam.name, **body}, format="json")
