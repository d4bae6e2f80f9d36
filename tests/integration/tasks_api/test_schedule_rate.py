"""A team's scheduling rate: tasks a second through POST /tasks/ and the batch endpoint, per
team whichever token asks, each task of a batch counted, 429 naming the setting."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from django.test import override_settings
from rest_framework.test import APIClient

from tasks_core.models import TaskEntity
from tests.integration.tasks_api.test_api_support import Member, member, schedule, token_client

pytestmark = pytest.mark.django_db

#: One task a second with batches of at most 50: a window of 100 s holds 100 tasks, so the
#: test's few seconds never see the count fall.
SLOW = {"ATF_API_SCHEDULE_RATE_PER_TEAM": 1, "ATF_MAX_BATCH_SIZE": 50}


def batch(who: Any, lambda_name: str, size: int) -> Any:
    return who.post("/api/v1/tasks/batch/", {"tasks": [{"lambda": lambda_name}] * size},
                    format="json")


@pytest.fixture
def alice(redis_client: redis.Redis) -> Member:  # the cache's counts start empty
    return member("alpha")


@override_settings(**SLOW)
def test_a_team_over_its_scheduling_rate_is_refused_naming_the_setting(alice: Member) -> None:
    # Given team alpha scheduled two full batches (all its window holds)
    assert batch(alice.client, alice.lam.name, 50).status_code == 201
    assert batch(alice.client, alice.lam.name, 50).status_code == 201
    # When it sends another batch, a single task, and a task from another token of the team
    other_token = token_client(alice.user, alice.team)
    refused = [batch(alice.client, alice.lam.name, 50), schedule(alice),
               other_token.post("/api/v1/tasks/", {"lambda": alice.lam.name}, format="json")]
    # Then each is refused with 429 naming the setting and a time to wait, and creates nothing
    for answer in refused:
        assert answer.status_code == 429, answer.content
        assert answer.json()["detail"].startswith(
            "Your team is scheduling tasks too fast: ATF_API_SCHEDULE_RATE_PER_TEAM allows 1 "
            "tasks a second (each task of a batch counts).")
        assert 1 <= int(answer["Retry-After"]) <= 200
    assert TaskEntity.objects.filter(lambda_ref=alice.lam).count() == 100


@override_settings(**SLOW)
def test_another_team_schedules_while_one_is_over_its_rate(alice: Member) -> None:
    # Given team alpha at its rate
    batch(alice.client, alice.lam.name, 50)
    batch(alice.client, alice.lam.name, 50)
    assert schedule(alice).status_code == 429
    # Then team beta schedules a full batch and a task
    bob = member("beta")
    assert batch(bob.client, bob.lam.name, 50).status_code == 201
    assert schedule(bob).status_code == 201


@override_settings(**SLOW)
def test_a_refused_batch_counts_nothing(alice: Member) -> None:
    # Given 51 tasks taken, then a batch of 50 refused (the window holds 100)
    assert batch(alice.client, alice.lam.name, 50).status_code == 201
    assert schedule(alice, delay=1).status_code == 201
    assert batch(alice.client, alice.lam.name, 50).status_code == 429
    # Then the 49 still under the rate are taken
    assert batch(alice.client, alice.lam.name, 49).status_code == 201


@override_settings(ATF_API_SCHEDULE_RATE_PER_TEAM=0, ATF_MAX_BATCH_SIZE=50)
def test_zero_lifts_the_rate(alice: Member) -> None:
    assert [batch(alice.client, alice.lam.name, 50).status_code
            for _ in range(5)] == [201] * 5


@override_settings(**SLOW)
def test_the_last_window_weighs_as_much_as_it_still_overlaps(alice: Member) -> None:
    from types import SimpleNamespace

    from tasks_api import schedule_rate

    caller: Any = SimpleNamespace(auth=None, user=alice.user)  # a session: the user's count
    span_s = 100.0  # SLOW: a window of 100 tasks at one a second
    start = (10**7 // span_s + 1) * span_s  # the start of a window
    # Given the whole of one window's 100 tasks taken in its last moments
    schedule_rate.take(caller, 100, now=start - 1)
    # When a quarter of the next window has gone, the last one still weighs three quarters
    schedule_rate.take(caller, 25, now=start + span_s / 4)
    with pytest.raises(schedule_rate.ScheduleRateExceeded):
        schedule_rate.take(caller, 1, now=start + span_s / 4)
    # Then, half way through, half of it has gone: 25 more fit, and not one over
    schedule_rate.take(caller, 25, now=start + span_s / 2)
    with pytest.raises(schedule_rate.ScheduleRateExceeded):
        schedule_rate.take(caller, 1, now=start + span_s / 2)


@override_settings(**SLOW)
def test_a_members_session_and_team_less_token_count_against_their_team(alice: Member) -> None:
    # Given alice's team at its rate through her team's token
    assert batch(alice.client, alice.lam.name, 50).status_code == 201
    assert batch(alice.client, alice.lam.name, 50).status_code == 201
    # When she schedules signed in (a session), and with a full token filed under no team
    session = APIClient()
    session.force_login(alice.user)
    teamless = token_client(alice.user)
    answers = [session.post("/api/v1/tasks/", {"lambda": alice.lam.name}, format="json"),
               teamless.post("/api/v1/tasks/", {"lambda": alice.lam.name}, format="json")]
    # Then both are refused: one member's token and session share the team's budget
    assert [answer.status_code for answer in answers] == [429, 429], answers[0].content
    assert TaskEntity.objects.filter(lambda_ref=alice.lam).count() == 100
