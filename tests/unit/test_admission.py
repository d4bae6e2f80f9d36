"""Fair admission: a team flooding one server process with slow requests does not make another
team's request wait behind them."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from tasks_api.admission import Admission
from tests.conftest import wait_for


class Requests:
    """Requests of several teams, each on a thread of its own, run until released."""

    def __init__(self, admission: Admission) -> None:
        self.admission = admission
        self.running: list[str] = []  #: names of the requests admitted, in order
        self._lock = threading.Lock()
        self._release: dict[str, threading.Event] = {}
        self._threads: list[threading.Thread] = []

    def send(self, team: str, name: str) -> None:
        self._release[name] = threading.Event()
        thread = threading.Thread(target=self._run, args=(team, name), daemon=True)
        self._threads.append(thread)
        thread.start()

    def _run(self, team: str, name: str) -> None:
        with self.admission.running(team):
            with self._lock:
                self.running.append(name)
            self._release[name].wait(10)

    def end(self, name: str) -> None:
        self._release[name].set()

    def end_all(self) -> None:
        for release in self._release.values():
            release.set()
        for thread in self._threads:
            thread.join(10)


@pytest.fixture
def requests() -> Iterator[Requests]:
    sent = Requests(Admission(slots=3))
    yield sent
    sent.end_all()


def queued(requests: Requests, team: str, count: int) -> None:
    """Wait until `count` requests of `team` wait for their turn."""
    wait_for(lambda: requests.admission.waiting(team) == count, timeout_s=5)


def test_a_team_never_takes_the_last_place_so_another_team_runs_at_once(
        requests: Requests) -> None:
    # Given team A's slow requests, more than the process runs at once
    for n in range(5):
        requests.send("a", f"a{n}")
    queued(requests, "a", 3)
    # Then it runs all but one of the three places
    assert requests.running == ["a0", "a1"]
    # And team B's request, sent after A's three waiting ones, runs at once in the last one
    requests.send("b", "b0")
    wait_for(lambda: "b0" in requests.running, timeout_s=2)
    assert requests.admission.waiting("a") == 3


def test_a_freed_place_goes_to_the_waiting_team_that_runs_the_fewest(
        requests: Requests) -> None:
    # Given team A running two slow requests and team B one: every place taken
    requests.send("a", "a0")
    requests.send("a", "a1")
    wait_for(lambda: len(requests.running) == 2, timeout_s=5)
    requests.send("b", "b0")
    wait_for(lambda: len(requests.running) == 3, timeout_s=5)
    # And waiting, in this order: A's next request, B's next, then team C's first
    requests.send("a", "a2")
    queued(requests, "a", 1)
    requests.send("b", "b1")
    queued(requests, "b", 1)
    requests.send("c", "c0")
    queued(requests, "c", 1)
    # When one of A's ends, C (running none) runs next, though it came last
    requests.end("a0")
    wait_for(lambda: len(requests.running) == 4, timeout_s=5)
    assert requests.running[3] == "c0"
    # And when B's ends, B's next (B runs none now; A one) runs before A's
    requests.end("b0")
    wait_for(lambda: len(requests.running) == 5, timeout_s=5)
    assert requests.running[4] == "b1"
    # And A's last runs once a place is free for it
    requests.end("c0")
    wait_for(lambda: len(requests.running) == 6, timeout_s=5)
    assert requests.running[5] == "a2"


def test_no_limit_runs_everything_at_once() -> None:
    sent = Requests(Admission(slots=0))
    try:
        for n in range(6):
            sent.send("a", f"a{n}")
        wait_for(lambda: len(sent.running) == 6, timeout_s=5)
    finally:
        sent.end_all()
