"""A request holds its team's shares and its turn to run until it answers, whatever the answer;
a team flooding the process keeps to its share of them."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connections
from rest_framework.response import Response
from rest_framework.test import APIClient

from tasks_api import admission, fair_share
from tasks_api.views import TaskViewSet
from tests.conftest import wait_for
from tests.held_threads import HeldThreads
from tests.integration.tasks_api.test_api_support import Member, member

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


class HeldRequests(HeldThreads):
    """Team members' `GET /tasks/`, each on a thread of its own, held in the view until ended."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        super().__init__()
        self.entered: list[str] = []  #: the requests that reached the view, in order

        def held(view: TaskViewSet, request: Any, *_args: Any, **_kwargs: Any) -> Response:
            name = request.query_params["probe"]
            self.entered.append(name)
            self.hold(name)
            return Response([])

        monkeypatch.setattr(TaskViewSet, "list", held)

    def send(self, who: Member, name: str) -> None:
        self.start(name, self._get, who, name)

    @staticmethod
    def _get(who: Member, name: str) -> None:
        try:
            client = APIClient()
            client.credentials(HTTP_AUTHORIZATION=f"Token {who.token}")
            client.get(f"/api/v1/tasks/?probe={name}")
        finally:
            connections.close_all()


@pytest.mark.django_db(transaction=True)
def test_a_flooding_team_keeps_to_its_share_and_runs_one_request_beside_another_team(
        settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given four turns to run (a team half of them, a busier team one), three requests a team
    settings.ATF_API_ACTIVE_REQUESTS, settings.ATF_API_ACTIVE_REQUESTS_PER_BUSY_TEAM = 4, 1
    settings.ATF_API_CONCURRENT_PER_TEAM = 3
    flooder, other = member("flooder"), member("other")
    a, b = f"team-{flooder.team.pk}", f"team-{other.team.pk}"
    held = HeldRequests(monkeypatch)
    try:
        # When team A sends three slow requests: two run, one waits for a turn
        for n in range(3):
            held.send(flooder, f"a{n}")
        wait_for(lambda: admission.requests.waiting(a) == 1, timeout_s=10)
        assert admission.requests.running(a) == 2
        # Then its fourth is refused at once, naming the share
        refused = flooder.client.get("/api/v1/tasks/?probe=a3")
        assert refused.status_code == 429
        assert "ATF_API_CONCURRENT_PER_TEAM" in refused.json()["detail"]
        assert refused.headers["Retry-After"] == str(fair_share.RETRY_AFTER_S)
        # And team B's request runs at once, beside A's two
        held.send(other, "b0")
        wait_for(lambda: "b0" in held.entered, timeout_s=10)
        assert admission.requests.running(b) == 1
        # And while B's runs, A's ended request frees a turn that A's waiting one does not take:
        # A, the busier team, runs one request at a time
        held.end(next(name for name in held.entered if name.startswith("a")))
        wait_for(lambda: admission.requests.running(a) + admission.requests.waiting(a) == 2,
                 timeout_s=10)
        assert (admission.requests.running(a), admission.requests.waiting(a)) == (1, 1)
    finally:
        held.end_all()
