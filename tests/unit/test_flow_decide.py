"""Flow control's pure parts: rates as written, and which candidates a claim holds back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tasks_core import rates
from tasks_core.flow import HOLD_RECHECK_S, Candidate, Limits, Usage, decide

NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(("text", "per_s", "window"), [
    ("20/s", 20.0, rates.Window(20, 1.0)),
    ("10/m", 10 / 60, rates.Window(10, 60.0)),
    ("60/m", 1.0, rates.Window(1, 1.0)),
    ("7/h", 7 / 3600, rates.Window(7, 3600.0)),
])
def test_a_rate_is_read_and_windowed_as_written(text: str, per_s: float,
                                                window: rates.Window) -> None:
    assert rates.per_second(text) == pytest.approx(per_s)
    assert rates.window(rates.per_second(text) or 0) == window


@pytest.mark.parametrize("bad", ["fast", "10/d", "", True, None, float("inf")])
def test_what_is_no_rate_reads_as_none(bad: object) -> None:
    assert rates.per_second(bad) is None


def test_a_concurrency_admits_the_highest_priorities_first() -> None:
    limits = {1: Limits(lambda_id=1, concurrency=2)}
    candidates = [Candidate(10, 1, None, "low"), Candidate(11, 1, None, "high"),
                  Candidate(12, 1, None, "default")]
    holds = decide(candidates, limits, Usage(), NOW)
    assert set(holds) == {10}
    assert holds[10].until == NOW + timedelta(seconds=HOLD_RECHECK_S)


def test_a_rate_holds_each_waiting_task_until_its_own_slot_frees() -> None:
    limits = {1: Limits(lambda_id=1, rate=rates.Window(2, 1.0))}
    usage = Usage(starts={(1, ""): [NOW - timedelta(seconds=0.5)]})
    holds = decide([Candidate(pk, 1, None, "default") for pk in (1, 2, 3)], limits, usage, NOW)
    # One slot is free now; the next frees when the start 0.5 s ago leaves the window, the one
    # after when this claim's start does
    assert {pk: hold.until for pk, hold in holds.items()} == {
        2: NOW + timedelta(seconds=0.5), 3: NOW + timedelta(seconds=1)}


def test_a_busy_key_holds_only_its_own_tasks() -> None:
    limits = {1: Limits(lambda_id=1, key_concurrency=1)}
    usage = Usage()
    usage.running_by_key[1, "a"] = 1
    holds = decide([Candidate(1, 1, "a", "default"), Candidate(2, 1, "b", "default"),
                    Candidate(3, 1, None, "default")], limits, usage, NOW)
    assert set(holds) == {1}
