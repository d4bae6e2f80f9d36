from __future__ import annotations

import pytest

from tasks_core import backoff


@pytest.mark.parametrize(
    ("attempt", "ceiling"),
    [(1, 1.0), (2, 2.0), (3, 4.0), (5, 16.0), (10, 60.0), (200, 60.0)],
)
def test_ceiling_doubles_per_attempt_up_to_the_cap(attempt: int, ceiling: float) -> None:
    assert backoff.delay_s(attempt, base_s=1.0, cap_s=60.0, rand=lambda: 1.0) == ceiling


def test_full_jitter_scales_the_ceiling() -> None:
    assert backoff.delay_s(3, base_s=1.0, cap_s=60.0, rand=lambda: 0.25) == 1.0
    assert backoff.delay_s(3, base_s=1.0, cap_s=60.0, rand=lambda: 0.0) == 0.0


def test_real_jitter_stays_within_the_ceiling() -> None:
    delays = [backoff.delay_s(4, base_s=0.5, cap_s=60.0) for _ in range(500)]
    assert all(0 <= d <= 4.0 for d in delays)
    assert len(set(delays)) > 100
