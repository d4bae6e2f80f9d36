"""The server's short memory of tokens (tasks_api.token_cache): what it delays, what it does not."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.test import override_settings
from django.utils import timezone

from tasks_api import authentication, memory, token_cache, tokens
from tasks_api.models import ApiToken
from tests.integration.tasks_api.test_api_support import Member, member

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """The memory's clock, moved on by the tests; nothing remembered before or after."""
    now = [1000.0]
    monkeypatch.setattr(memory, "_now", lambda: now[0])
    token_cache.forget_all()
    yield now
    token_cache.forget_all()


@pytest.fixture
def alice() -> Member:
    return member("alpha")


def lambdas_seen(who: Member) -> set[str]:
    response = who.client.get("/api/v1/lambdas/")
    assert response.status_code == 200, response.json()
    return {row["name"] for row in response.json()}


@override_settings(ATF_API_AUTH_CACHE_S=5.0)
def test_a_token_revoked_elsewhere_is_refused_once_the_memory_lapses(
        alice: Member, clock: list[float]) -> None:
    # Given a token the server has just checked
    assert alice.client.get("/api/v1/lambdas/").status_code == 200
    # When another process revokes it (a change this process sends no signal for)
    ApiToken.objects.filter(user=alice.user).update(revoked_at=timezone.now())
    # Then it still works while remembered, for at most ATF_API_AUTH_CACHE_S
    clock[0] += 4.9
    assert alice.client.get("/api/v1/lambdas/").status_code == 200
    # And is refused from then on
    clock[0] += 0.2
    response = alice.client.get("/api/v1/lambdas/")
    assert response.status_code == 401
    assert response.json() == {"detail": "Token revoked or expired."}


@override_settings(ATF_API_AUTH_CACHE_S=0)
def test_a_memory_of_zero_seconds_checks_the_database_on_every_request(alice: Member) -> None:
    assert alice.client.get("/api/v1/lambdas/").status_code == 200
    ApiToken.objects.filter(user=alice.user).update(revoked_at=timezone.now())
    assert alice.client.get("/api/v1/lambdas/").status_code == 401


def test_an_expired_token_is_refused_at_once_though_remembered(
        alice: Member, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a token that expires in a minute, checked (and so remembered) by the server
    soon = timezone.now() + timedelta(minutes=1)
    ApiToken.objects.filter(user=alice.user).update(expires_at=soon)
    assert alice.client.get("/api/v1/lambdas/").status_code == 200
    assert token_cache.get(tokens.digest(alice.token)) is not None
    # When that minute has passed, Then it is refused: expiry is checked on every request
    later = SimpleNamespace(now=lambda: soon + timedelta(seconds=1))
    monkeypatch.setattr(authentication, "timezone", later)
    response = alice.client.get("/api/v1/lambdas/")
    assert response.status_code == 401
    assert response.json() == {"detail": "Token revoked or expired."}


def test_changes_made_in_this_process_take_effect_at_once(alice: Member) -> None:
    bob = member("beta")
    assert lambdas_seen(alice) == {"alpha.work"}
    # A membership added, then removed
    bob.team.members.add(alice.user)
    assert lambdas_seen(alice) == {"alpha.work", "beta.work"}
    bob.team.members.remove(alice.user)
    assert lambdas_seen(alice) == {"alpha.work"}
    # A token revoked through tokens.revoke (the API, the console)
    tokens.revoke(ApiToken.objects.get(user=bob.user), now=timezone.now())
    assert bob.client.get("/api/v1/lambdas/").status_code == 401
    # A user deactivated
    alice.user.is_active = False
    alice.user.save()
    assert alice.client.get("/api/v1/lambdas/").status_code == 401


def test_each_request_gets_its_own_row_and_user(alice: Member) -> None:
    assert alice.client.get("/api/v1/lambdas/").status_code == 200
    first = token_cache.get(tokens.digest(alice.token))
    second = token_cache.get(tokens.digest(alice.token))
    assert first is not None and second is not None
    assert first is not second and first.user is not second.user
    assert first.pk == second.pk and first.user.pk == second.user.pk


def test_unknown_tokens_are_not_remembered() -> None:
    assert tokens.find("atf_" + "x" * 40) is None
    assert token_cache.get(tokens.digest("atf_" + "x" * 40)) is None
