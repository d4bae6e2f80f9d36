"""OutageLog, on a clock the test moves: a warning when an outage starts, at most one a minute
while it lasts, and one line when it ends."""

from __future__ import annotations

import logging

import pytest

from workers.outages import OutageLog


class Clock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def outage(clock: Clock) -> OutageLog:
    return OutageLog(logging.getLogger("tests.outages"), "reach Redis", clock=clock)


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == "tests.outages"]


def test_an_outage_is_said_when_it_starts_each_minute_and_when_it_ends(
        outage: OutageLog, clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="tests.outages")
    # When tries fail four times a second for 2.5 minutes
    for _ in range(600):
        outage.failed("connection refused")
        clock.now_s += 0.25
    # Then the start is said, then once a minute how long it has lasted
    assert _lines(caplog) == [
        "cannot reach Redis: connection refused (said again each minute while it lasts)",
        "cannot reach Redis for 60 s now: connection refused",
        "cannot reach Redis for 120 s now: connection refused",
    ]
    assert {record.levelname for record in caplog.records} == {"WARNING"}
    # When a try succeeds, Then the end is said with how long the outage lasted, once
    clock.now_s += 2
    outage.succeeded()
    outage.succeeded()
    assert _lines(caplog)[3:] == ["can reach Redis again, after 152 s"]


def test_tries_that_succeed_say_nothing_and_a_new_outage_is_said_again(
        outage: OutageLog, clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="tests.outages")
    outage.succeeded()
    assert _lines(caplog) == []
    outage.failed("timeout")
    clock.now_s += 5
    outage.succeeded()
    clock.now_s += 30
    outage.failed("refused")
    assert _lines(caplog) == [
        "cannot reach Redis: timeout (said again each minute while it lasts)",
        "can reach Redis again, after 5 s",
        "cannot reach Redis: refused (said again each minute while it lasts)",
    ]
