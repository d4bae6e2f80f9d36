"""The consumer's looks for periodic occurrences take at most their share of its time."""

from __future__ import annotations

import pytest

from workers.consumer import PERIODIC_INTERVAL_S, PERIODIC_SHARE, _next_periodic_look


def test_a_quick_look_comes_again_after_the_interval() -> None:
    assert _next_periodic_look(100.0, 100.001) == pytest.approx(100.0 + PERIODIC_INTERVAL_S)


def test_a_slow_look_puts_the_next_off_to_keep_its_share() -> None:
    # A look of 0.5 s: the next comes when looks have taken PERIODIC_SHARE of the time
    nxt = _next_periodic_look(100.0, 100.5)
    assert 0.5 / (nxt - 100.0) == pytest.approx(PERIODIC_SHARE)
