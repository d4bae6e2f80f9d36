"""The benchmark's pure helpers: windows of started tasks and the backlog ramp."""

import pytest

from bench import stats


def test_window_rates_counts_starts_per_second_in_whole_windows():
    starts = [10.0, 10.1, 10.6, 11.2, 11.4, 11.45, 12.9]
    rates = stats.window_rates(starts, begin=10.0, end=11.6, window_s=0.5)
    # Three whole windows: [10, 10.5), [10.5, 11), [11, 11.5); the start at 12.9 is outside.
    assert rates == [4.0, 2.0, 6.0]


def test_window_rates_ignores_starts_before_the_release():
    assert stats.window_rates([9.0, 9.9, 10.2], begin=10.0, end=11.0, window_s=0.5) == [2.0, 0.0]


def test_ramp_is_the_start_of_the_first_window_near_the_steady_rate():
    rates = [0.0, 100.0, 500.0, 950.0, 1000.0, 1000.0, 990.0, 1010.0, 1000.0]
    ramp_s, steady = stats.ramp_seconds(rates, window_s=0.5, fraction=0.9)
    assert steady == 990.0
    assert ramp_s == 1.5  # the fourth window, at 950 >= 0.9 x 990


def test_a_drain_at_full_speed_from_the_release_has_no_ramp():
    assert stats.ramp_seconds([800.0, 810.0, 790.0], window_s=0.5) == (0.0, 800.0)


def test_a_drain_that_never_started_has_no_ramp():
    with pytest.raises(ValueError, match="no task started"):
        stats.ramp_seconds([0.0, 0.0], window_s=0.5)


def test_lateness_has_a_p99():
    rows = [(0.0, index / 1000.0, 0.0) for index in range(1, 101)]
    assert stats.lateness_ms(rows)["p99"] == pytest.approx(99.0)


@pytest.mark.parametrize(("fraction", "expected"), [(0.5, 50), (0.95, 95), (0.99, 99),
                                                    (1.0, 100), (0.0, 1), (0.001, 1)])
def test_percentile_is_the_nearest_rank(fraction, expected):
    assert stats.percentile(list(range(100, 0, -1)), fraction) == expected


@pytest.mark.parametrize(("moment", "value"), [
    (10.0, 1.0), (10.5, 1.5), (11.25, 2.5), (12.0, 4.0),  # on a sample, or between two
    (9.0, 1.0), (13.0, 4.0),  # before the first sample, after the last
])
def test_value_at_interpolates_a_sampled_counter(moment, value):
    samples = [(10.0, 1.0), (11.0, 2.0), (12.0, 4.0)]
    assert stats.value_at(samples, moment) == pytest.approx(value)
