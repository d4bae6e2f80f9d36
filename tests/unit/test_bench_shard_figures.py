"""The sharded store's figures: efficiency, the pipeline's ratio, skew and the kill's rates."""

import pytest

from bench import shard_figures


def test_efficiency_is_the_total_over_that_many_one_shard_drains():
    figures = {"shard_s1": 400.0, "shard_s2": 760.0, "shard_s3": 1020.0,
               "shard_s1_pipeline_cpu_us": 1000.0, "shard_s3_pipeline_cpu_us": 1150.0}
    done = shard_figures.with_comparisons(figures, (1, 2, 3))
    assert done["shard_s1_efficiency"] == pytest.approx(1.0)
    assert done["shard_s2_efficiency"] == pytest.approx(0.95)
    assert done["shard_s3_efficiency"] == pytest.approx(0.85)
    assert done["shard_s3_pipeline_ratio"] == pytest.approx(1.15)
    assert "shard_s2_pipeline_ratio" not in done  # its CPU was not measured
    assert done["shard_s2"] == 760.0  # the given figures are kept


def test_nothing_is_compared_without_the_one_shard_drain():
    done = shard_figures.with_comparisons({"shard_s2": 760.0,
                                           "shard_s2_pipeline_cpu_us": 900.0}, (2, 3))
    assert not any(key.endswith(("_efficiency", "_ratio")) for key in done)


def test_one_shards_figures_are_the_mean_of_its_drains_before_and_after_the_others():
    first = {"shard_s1": 200.0, "shard_s1_pipeline_cpu_us": 900.0, "shard_s1_slot0_rate": 200.0}
    last = {"shard_s1": 240.0, "shard_s1_pipeline_cpu_us": 800.0, "shard_s1_slot0_rate": 240.0}
    both = shard_figures.baseline_twice(first, last)
    assert both == {"shard_s1": 220.0, "shard_s1_pipeline_cpu_us": 850.0,
                    "shard_s1_slot0_rate": 220.0, "shard_s1_first": 200.0, "shard_s1_last": 240.0}
    # the two ends are not taken for shard counts of their own
    assert shard_figures.shard_counts(both) == [1]
    done = shard_figures.with_comparisons({**both, "shard_s2": 396.0}, (1, 2))
    assert done["shard_s2_efficiency"] == pytest.approx(0.9)


def test_skew_is_the_spread_of_the_shards_rates_over_their_mean():
    assert shard_figures.skew([300.0, 300.0, 300.0]) == 0.0
    assert shard_figures.skew([330.0, 300.0, 270.0]) == pytest.approx(0.2)


def test_the_survivors_rate_before_and_after_the_kill():
    # Survivors' tasks: 4 finish by the kill at t=2 (first start t=0), 6 in the 3 s after it.
    rows = [(0.0, start, end) for start, end in
            [(0.0, 0.5), (0.2, 1.0), (0.9, 1.5), (1.4, 2.0),
             (1.9, 2.5), (2.1, 3.0), (2.6, 3.5), (3.0, 4.0), (3.5, 4.5), (4.0, 5.0)]]
    rates = shard_figures.kill_rates(rows, killed_at=2.0)
    assert rates[shard_figures.KILL_BEFORE] == pytest.approx(2.0)
    assert rates[shard_figures.KILL_AFTER] == pytest.approx(2.0)
    assert rates[shard_figures.KILL_RATIO] == pytest.approx(1.0)


def test_keys_and_the_counts_read_back_from_them():
    assert shard_figures.slot_key(3, 1, "pg_cpu_us") == "shard_s3_slot1_pg_cpu_us"
    keys = ["shard_s3", "shard_s1", "shard_s2_skew", "shard_s1_slot0_rate", "scaling_w2",
            "shard_kill_ratio", "shard_s12"]
    assert shard_figures.shard_counts(keys) == [1, 3, 12]
