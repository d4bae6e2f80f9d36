"""A request holds its team's shares and its turn to run until it answers, whatever the answer."""

from __future__ import annotations

from typing import Any

import pytest

from tasks_api import admission, fair_share
from tasks_api.views import TaskViewSet
from tests.integration.tasks_api.test_api_support import member

pytestmark = pytest.mark.django_db


def test_a_request_that_ends_in_a_500_gives_its_share_and_its_turn_back(
        settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given one request in progress a team, one running at once in the process
    settings.ATF_API_CONCURRENT_PER_TEAM, settings.ATF_API_ACTIVE_REQUESTS = 1, 2
    someone = member("payments")
    someone.client.raise_request_exception = False

    def broken(*_args: Any, **_kwargs: Any) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(TaskViewSet, "list", broken)
    # When a request of the team fails with a 500
    assert someone.client.get("/api/v1/tasks/").status_code == 500
    # Then the team holds nothing: its next request is neither refused nor kept waiting
    team = f"team-{someone.team.pk}"
    assert fair_share.requests.holding(f"team:{team}") == 0
    assert admission.requests.running(team) == 0
    monkeypatch.undo()
    assert someone.client.get("/api/v1/tasks/").status_code == 200
