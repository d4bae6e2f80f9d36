"""The drain-scaling figures: each drain's total CPU per task and its ratio to one process's."""

import pytest

from bench import scaling_figures


def test_the_total_sums_every_process_of_that_drain_only():
    figures = {"scaling_w1": 1000.0, "cpu_scaling_w1_worker": 500.0,
               "cpu_scaling_w1_consumer": 40.0, "cpu_scaling_w1_postgres": 300.0,
               "cpu_scaling_w1_redis": 60.0, "scaling_w4": 1500.0,
               "cpu_scaling_w4_worker": 700.0, "cpu_scaling_w4_postgres": 350.0}
    done = scaling_figures.with_totals(figures, (1, 4))
    assert done["cpu_scaling_w1_total"] == pytest.approx(900.0)
    assert done["cpu_scaling_w4_total"] == pytest.approx(1050.0)  # not w1's, nor the rate
    assert done["scaling_w4"] == 1500.0  # the given figures are kept


def test_each_total_is_a_ratio_of_the_one_process_drains():
    figures = {"cpu_scaling_w1_worker": 800.0, "cpu_scaling_w2_worker": 880.0,
               "cpu_scaling_w4_worker": 1040.0}
    done = scaling_figures.with_totals(figures, (1, 2, 4))
    assert done["cpu_scaling_w1_ratio"] == pytest.approx(1.0)
    assert done["cpu_scaling_w2_ratio"] == pytest.approx(1.1)
    assert done["cpu_scaling_w4_ratio"] == pytest.approx(1.3)


def test_no_ratio_without_the_one_process_drain():
    done = scaling_figures.with_totals({"cpu_scaling_w2_worker": 880.0}, (2, 4))
    assert not any(key.endswith("_ratio") for key in done)
    assert done["cpu_scaling_w4_total"] == 0.0


def test_worker_counts_are_those_of_the_drain_rates():
    keys = ["scaling_w4", "scaling_w1", "cpu_scaling_w2_worker", "scale_w2_c1", "scaling_w12"]
    assert scaling_figures.worker_counts(keys) == [1, 4, 12]
