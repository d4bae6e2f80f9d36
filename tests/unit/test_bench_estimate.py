"""The benchmark's duration estimate."""

from types import SimpleNamespace

import pytest

from bench import estimate


def _plan(**changes):
    sizes = dict(repeats=3, enqueue_n=20_000, in_transaction_n=5_000, drain_n=13_000,
                 limit_inserts=5_000, limit_updated_rows=50_000, limit_round_trips=8_000,
                 scale_workers=(1, 2, 4), scale_consumers=(1, 2))
    return SimpleNamespace(**{**sizes, **changes})


def test_each_repetition_counts_for_every_system():
    plan = _plan()
    one = estimate.seconds(plan, ["atf"], ["enqueue_single"], once=())
    both = estimate.seconds(plan, ["atf", "huey"], ["enqueue_single"], once=())
    assert one == pytest.approx(3 * (20_000 / estimate.ENQUEUE["atf"] + 3))
    assert both == pytest.approx(one + 3 * (20_000 / estimate.ENQUEUE["huey"] + 3))


def test_a_measurement_run_once_is_counted_once_and_for_atf_only():
    plan = _plan()
    curve = estimate.seconds(plan, ["atf", "huey"], ["scale_curve"], once=("scale_curve",))
    drain = 13_000 / estimate.BULK["atf"] + 13_000 / estimate.DRAIN["atf"] + estimate.FLEET_S
    assert curve == pytest.approx(6 * drain)


def test_the_machine_limits_are_measured_once_per_repetition():
    plan = _plan()
    assert estimate.seconds(plan, ["atf"], ["machine_limits"], once=()) == pytest.approx(
        3 * (5 + 1 + 1 + 2))


def test_the_shard_drains_count_each_cluster_and_the_kill_only_above_one_shard():
    plan = _plan(repeats=1, shard_counts=(1, 2), shard_cpu=0.5, immediate_n=60,
                 immediate_rate=20, delayed_n=800, delay_max_s=8)
    lateness = estimate.FLEET_S + 3 + 800 / estimate.ENQUEUE["atf"] + 8

    def drain(shards):
        return (estimate.PRIVATE_CLUSTER_S * shards + 13_000 / estimate.BULK["atf"]
                + estimate.FLEET_S + 13_000 / (estimate.SHARD_DRAIN_PER_CORE * 0.5 * shards))

    assert estimate.seconds(plan, ["atf", "huey"], ["shard_scaling"], once=()) == \
        pytest.approx(2 * drain(1) + drain(2) + 3 * lateness)  # one shard first and last
    assert estimate.seconds(plan, ["atf"], ["shard_kill"], once=()) == pytest.approx(drain(2))
    assert estimate.seconds(_plan(shard_counts=(1,), shard_cpu=0.5), ["atf"], ["shard_kill"],
                            once=()) == 0.0
    unlimited = _plan(repeats=1, shard_counts=(2,), shard_cpu=0)  # no quota: the plain drain
    assert estimate.seconds(unlimited, ["atf"], ["shard_kill"], once=()) == pytest.approx(
        estimate.PRIVATE_CLUSTER_S * 2 + 13_000 / estimate.BULK["atf"] + estimate.FLEET_S
        + 13_000 / estimate.DRAIN["atf"])
