"""Fair admission: a team flooding one server process with slow requests does not make another
team's request wait behind them."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from tasks_api.admission import Admission
from tests.conftest import wait_for
from tests.held_threads import HeldThreads


class Requests(HeldThreads):
    """Requests of several teams, each on a thread of its own, run until ended."""

    def __init__(self, admission: Admission) -> None:
        super().__init__()
        self.admission = admission
        self.running: list[str] = []  #: names of the requests admitted, in order
        self._lock = threading.Lock()

    def send(self, team: str, name: str) -> None:
        self.start(name, self._run, team, name)

    def _run(self, team: str, name: str) -> None:
        with self.admission.turn(team):
            with self._lock:
                self.running.append(name)
            self.hold(name)


@pytest.fixture
def requests() -> Iterator[Requests]:
    sent = Requests(Admission(slots=4, busy=0))
    yield sent
    sent.end_all()


@pytest.fixture
def turns() -> Iterator[Requests]:
    """Eight turns, as the API's gunicorn config has (its database pool), a busy team one."""
    sent = Requests(Admission(slots=8, busy=1))
    yield sent
    sent.end_all()


def queued(requests: Requests, team: str, count: int) -> None:
    """Wait until `count` requests of `team` wait for their turn."""
    wait_for(lambda: requests.admission.waiting(team) == count, timeout_s=5)


def test_a_team_takes_half_the_places_so_another_team_runs_at_once(
        requests: Requests) -> None:
    # Given team A's slow requests, more than the process runs at once
    for n in range(5):
        requests.send("a", f"a{n}")
    queued(requests, "a", 3)
    # Then it runs half of the four places
    assert requests.running == ["a0", "a1"]
    # And team B's two requests, sent after A's three waiting ones, run at once
    requests.send("b", "b0")
    requests.send("b", "b1")
    wait_for(lambda: {"b0", "b1"} <= set(requests.running), timeout_s=2)
    assert requests.admission.waiting("a") == 3


def test_a_freed_place_goes_to_the_waiting_team_that_runs_the_fewest(
        requests: Requests) -> None:
    # Given teams A and B running two slow requests each: every place taken
    for name in ("a0", "a1", "b0", "b1"):
        requests.send(name[0], name)
    wait_for(lambda: len(requests.running) == 4, timeout_s=5)
    # And waiting, in this order: A's next request, B's next, then team C's first
    requests.send("a", "a2")
    queued(requests, "a", 1)
    requests.send("b", "b2")
    queued(requests, "b", 1)
    requests.send("c", "c0")
    queued(requests, "c", 1)
    # When one of A's ends, C (running none) runs next, though it came last
    requests.end("a0")
    wait_for(lambda: len(requests.running) == 5, timeout_s=5)
    assert requests.running[4] == "c0"
    # And when A's other one ends, A's next runs (B, running its half, may not)
    requests.end("a1")
    wait_for(lambda: len(requests.running) == 6, timeout_s=5)
    assert requests.running[5] == "a2"
    # And B's next runs when one of B's ends
    requests.end("b0")
    wait_for(lambda: len(requests.running) == 7, timeout_s=5)
    assert requests.running[6] == "b2"


def test_a_busier_team_runs_one_request_while_a_lighter_team_is_active(
        turns: Requests) -> None:
    # Given team A alone, flooding: it runs half of the eight turns
    for n in range(8):
        turns.send("a", f"a{n}")
    queued(turns, "a", 4)
    assert turns.admission.running("a") == 4
    first = list(turns.running)
    # When team B's request comes, it runs at once
    turns.send("b", "b0")
    wait_for(lambda: "b0" in turns.running, timeout_s=2)
    # And while B is active, A's ended requests free turns but A runs one at a time
    for name in first:
        turns.end(name)
    wait_for(lambda: turns.admission.waiting("a") == 3, timeout_s=5)
    assert turns.admission.running("a") == 1
    # And B, the lighter team, still runs up to half of the turns
    for n in range(1, 5):
        turns.send("b", f"b{n}")
    wait_for(lambda: turns.admission.running("b") == 4, timeout_s=5)
    assert turns.admission.running("a") == 1


def test_no_limit_runs_everything_at_once() -> None:
    sent = Requests(Admission(slots=0))
    try:
        for n in range(6):
            sent.send("a", f"a{n}")
        wait_for(lambda: len(sent.running) == 6, timeout_s=5)
    finally:
        sent.end_all()

