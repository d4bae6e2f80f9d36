"""The scheduling rate's sliding window: how long a refused request is told to wait."""

from __future__ import annotations

from typing import Any

import pytest

from tasks_api.schedule_rate import tasks_in_batch, window_limit, windows_until_fits


@pytest.mark.parametrize(("previous", "current", "elapsed", "windows"), [
    (0, 0, 0.3, 0.0),  # fits now
    (100, 0, 0.0, 0.5),  # 100 + 50 over 100: the previous window must weigh half
    (100, 0, 0.4, 0.1),
    (100, 40, 0.0, 0.9),  # room 10 of the previous 100: it must weigh a tenth
    (0, 80, 0.25, 0.75 + 0.375),  # not this window: in the next, once its 80 weigh 50
    (60, 80, 0.5, 0.5 + 0.375),
])
def test_a_refused_request_waits_until_it_would_fit(previous: int, current: int, elapsed: float,
                                                   windows: float) -> None:
    assert windows_until_fits(tasks=50, limit=100, previous=previous, current=current,
                              elapsed=elapsed) == pytest.approx(windows)


def test_a_window_holds_two_full_batches_or_a_seconds_worth(settings: Any) -> None:
    settings.ATF_MAX_BATCH_SIZE = 1000
    assert window_limit(100) == 2000
    assert window_limit(5000) == 5000


def test_a_batch_counts_its_tasks_before_it_is_validated(settings: Any) -> None:
    settings.ATF_MAX_BATCH_SIZE = 1000
    assert tasks_in_batch({"tasks": [{}] * 3}) == 3
    assert tasks_in_batch({"tasks": [{}] * 5000}) == 1000  # refused for its size anyway
    assert tasks_in_batch({"tasks": "many"}) == tasks_in_batch([1, 2]) == 1
