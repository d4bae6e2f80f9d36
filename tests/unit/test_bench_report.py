"""The benchmark report: shares of the machine's limits, targets against them, new tables."""

import pytest

from bench import report


def _summary(median: float) -> dict[str, float]:
    return {"median": median, "min": median, "max": median, "runs": 1}


@pytest.mark.parametrize(("value", "limit", "text"), [
    (740, 1000, "74%"), (1000, 1000, "100%"), (1500, 1000, "150%"), (25, 1000, "2.5%"),
])
def test_percent_of_limit(value, limit, text):
    assert report.percent_of_limit(value, limit) == text


def _metric(key: str) -> report.Metric:
    return next(metric for metric in report.METRICS if metric.key == key)


def test_enqueue_target_needs_both_the_commit_limit_and_procrastinate():
    met = _metric("enqueue_single").met
    summaries = {"machine": {"pg_insert_commit": _summary(1000)},
                 "procrastinate": {"enqueue_single": _summary(300)}}
    assert met(500, summaries) is True
    assert met(490, summaries) is False  # under 0.5x the commit limit
    summaries["procrastinate"]["enqueue_single"] = _summary(600)
    assert met(800, summaries) is False  # under 1.5x procrastinate
    assert met(800, {}) is None  # nothing to compare with


def test_schedule_beside_the_commit_loop_is_judged_on_its_own_ratio():
    met = _metric("enqueue_vs_commit").met
    assert met(0.5, {}) is True  # the ratio was taken round by round: nothing else to read
    assert met(0.49, {"machine": {"pg_insert_commit": _summary(1)}}) is False


def test_a_limits_cost_is_judged_on_back_to_back_pairs_where_they_were_measured():
    met = _metric("drain_limited").met
    drains = {"atf": {"drain": _summary(1000)}}
    assert met(850, drains) is False  # 0.85x the plain drain's median, measured apart
    # the same drains, each limited one right after a plain one, at 0.95x of it
    paired = {"atf": {"drain": _summary(1000), "drain_limited_ratio": _summary(0.95)}}
    assert met(850, paired) is True
    paired["atf"]["drain_limited_ratio"] = _summary(0.85)
    assert met(950, paired) is False


def test_wal_target_is_procrastinates_wal_per_drained_task():
    met = _metric("cost_drain_wal_bytes").met
    summaries = {"procrastinate": {"cost_drain_wal_bytes": _summary(2000)}}
    assert met(2000, summaries) is True
    assert met(2001, summaries) is False
    assert met(2000, {}) is None  # procrastinate not in the run


@pytest.mark.parametrize("key", ["drain", "drain_per_core"])
def test_drain_target_is_the_faster_redis_peer(key):
    met = _metric(key).met
    summaries = {"huey": {"drain": _summary(1600)}, "dramatiq": {"drain": _summary(3700)}}
    assert met(3700, summaries) is True
    assert met(3699, summaries) is False


def test_remote_drain_target_is_four_fifths_of_the_direct_one():
    met = _metric("drain_remote").met
    summaries = {"atf": {"drain": _summary(1500)}}
    assert met(1200, summaries) is True
    assert met(1199, summaries) is False
    assert met(1200, {}) is None


def test_the_atf_cell_shows_its_share_of_the_limit():
    summaries = {"atf": {"enqueue_single": _summary(400)},
                 "machine": {"pg_insert_commit": _summary(1000)}}
    driver = type("Driver", (), {"NAME": "atf", "LABEL": "ATF"})
    assert "400 · 40% of limit" in report.table(summaries, [driver])


def test_limits_table_compares_each_limit_with_its_atf_figure():
    summaries = {"atf": {"drain": _summary(1500)},
                 "machine": {"redis_round_trip": _summary(6000), "pg_update_rows": _summary(
                     100_000)}}
    text = report.limits_table(summaries)
    assert "| 6,000 |" in text and "| 25% |" in text and "| 1.5% |" in text
    assert "INSERT+COMMIT" not in text  # not measured, so no row
    assert report.limits_table({"atf": {}}) == ""


def test_scale_table_has_a_row_per_worker_count_and_a_column_per_consumer_count():
    summaries = {"atf": {"scale_w1_c1": _summary(900), "scale_w1_c2": _summary(950),
                         "scale_w4_c1": _summary(2000)}}
    lines = report.scale_table(summaries).splitlines()
    assert lines[0] == "| worker processes | 1 consumer | 2 consumers |"
    assert lines[2:] == ["| 1 | 900 | 950 |", "| 4 | 2,000 | — |"]


def test_store_table_shows_each_size_as_a_ratio_of_the_empty_table():
    figures = {"store_0_pass_idle_ms": 4.0, "store_0_pass_busy_ms": 20.0,
               "store_0_schedule_ms": 1.0, "store_0_drain": 1000.0,
               "store_10M_insert_s": 300.0, "store_10M_vacuum_s": 60.0,
               "store_10M_pass_idle_ms": 4.4, "store_10M_pass_idle_ms_ratio": 1.1,
               "store_10M_drain": 950.0, "store_10M_drain_ratio": 0.95,
               "store_1M_insert_s": 30.0, "store_1M_vacuum_s": 6.0}
    text = report.store_table({"atf": {key: _summary(v) for key, v in figures.items()}})
    assert "| figure | empty table | 1M finished tasks | 10M finished tasks | target |" in text
    assert "4.4 (1.10× empty)" in text and "950 (0.95× empty)" in text
    assert "| generating the rows (INSERT … SELECT generate_series) (s) | — | 30.0 | 300 |" in text


def test_store_table_ends_with_the_backlog_against_the_empty_table():
    figures = {"store_0_pass_idle_ms": 4.0, "store_0_pass_busy_ms": 20.0,
               "store_0_claim_ms": 10.0, "store_0_schedule_ms": 1.0, "store_0_drain": 1000.0,
               "store_backlog_insert_s": 40.0, "store_backlog_vacuum_s": 9.0,
               "store_backlog_claim_ms": 12.0, "store_backlog_claim_ms_ratio": 1.2,
               "store_backlog_queue_queued": 5050.0, "store_backlog_queue_waiting": 5000.0,
               "store_backlog_queue_per_waiting": 1.01}
    text = report.store_table({"atf": {key: _summary(v) for key, v in figures.items()}})
    assert "backlog finished tasks" not in text  # the backlog is no size of history
    assert ("| a claim of the 500 tasks that pass enqueued (ms) | 10.0 | 12.0 (1.20× empty) "
            "| ≤ 1.5× empty |") in text
    assert "(5,050 messages, 5,000 tasks) | — | 1.010 | ≤ 1.01 |" in text


def test_pace_table_says_how_far_retention_fell_behind_in_minutes_of_tasks():
    figures = {"pace_scheduled": 36_000.0, "pace_finished_per_s": 598.0, "pace_waiting_max": 900.0,
               "pace_past_max": 18_000.0, "pace_past_per_minute": 0.5}
    text = report.pace_table({"atf": {key: _summary(v) for key, v in figures.items()}})
    assert "| most finished tasks past their retention at a count | 18,000 |" in text
    assert "| … as a share of one minute's tasks (target ≤ 1) | 0.500 |" in text
    assert report.pace_table({"atf": {}}) == ""


@pytest.mark.parametrize(("size", "label"), [(0, "0"), (100_000, "100k"),
                                             (1_000_000, "1M"), (10_000_000, "10M"),
                                             (1_500, "1500")])
def test_size_labels(size, label):
    assert report.size_label(size) == label


def _driver(name: str, label: str) -> type:
    return type("Driver", (), {"NAME": name, "LABEL": label})


def test_cost_table_shows_each_counter_per_phase_and_the_estimate_for_one_primary():
    figures = {f"cost_{phase}_{key}": 0.0 for phase in ("enqueue", "drain")
               for key, _label, _digits in report.COST_COUNTERS}
    figures.update(cost_enqueue_cpu_us=300.0, cost_drain_cpu_us=200.0,
                   cost_enqueue_wal_bytes=1000.0, cost_drain_wal_bytes=4000.0,
                   cost_drain_rows_updated=8.0)
    summaries = {"atf": {key: _summary(value) for key, value in figures.items()}}
    text = report.cost_table(summaries, [_driver("atf", "ATF"), _driver("huey", "Huey")])
    assert "| per task | ATF enqueue | ATF drain |" in text  # Huey has no store: no column
    assert "| rows updated | 0.00 | 8.00 |" in text
    # 500 µs a task: 2,000 tasks/s a core; 9,000/s needs 4.5 cores and 45 MB/s of WAL.
    assert "about 2,000 tasks/s" in text and "4.5 cores" in text and "45 MB/s" in text
    assert report.cost_table({"huey": {}}, [_driver("huey", "Huey")]) == ""


def test_wal_relations_table_ranks_by_drain_and_sums_the_rest():
    figures = {f"walrel_drain:rel{i}": float(i) for i in range(15)}
    figures["walrel_enqueue:rel14"] = 7.0
    text = report.wal_relations_table({"atf": {k: _summary(v) for k, v in figures.items()}})
    lines = text.strip().splitlines()
    assert lines[2] == "| rel14 | 7 | 14 |"
    assert lines[-1] == "| 3 others | 0 | 3 |"  # rel0 + rel1 + rel2


def test_cpu_table_sums_each_drains_processes_and_divides_the_cores_by_it(monkeypatch):
    monkeypatch.setattr(report.os, "cpu_count", lambda: 2)
    atf = {"drain": 1500.0, "cpu_drain_worker": 300.0, "cpu_drain_postgres": 150.0,
           "cpu_drain_redis": 50.0, "drain_remote": 1000.0, "cpu_drain_remote_worker": 250.0,
           "cpu_drain_remote_api": 500.0, "cpu_drain_remote_postgres": 250.0,
           "drain_per_core": 2500.0, "cpu_drain_per_core_worker": 400.0}
    peer = {"drain": 4000.0, "cpu_drain_worker": 200.0, "cpu_drain_redis": 50.0}
    summaries = {"atf": {k: _summary(v) for k, v in atf.items()},
                 "dramatiq": {k: _summary(v) for k, v in peer.items()}}
    text = report.cpu_table(summaries, [_driver("atf", "ATF"), _driver("dramatiq", "Dramatiq"),
                                        _driver("huey", "Huey")])
    lines = text.splitlines()
    assert lines[0] == ("| per drained task | ATF | Dramatiq | ATF, a worker process per core | "
                        "ATF, remote worker |")  # no Huey
    assert "| worker processes | 300 | 200 | 400 | 250 |" in lines
    assert "| consumer |" not in text  # no drain sampled one
    assert "| **all of them** | **500** | **250** | **400** | **1,000** |" in lines
    # 2 cores: 2,000,000 µs a second over each total
    assert "| drain those allow on 2 cores (tasks/s) | 4,000 | 8,000 | 5,000 | 2,000 |" in lines
    assert lines[-1] == "| drain measured (tasks/s) | 1,500 | 4,000 | 2,500 | 1,000 |"
    assert report.cpu_table({"huey": {}}, [_driver("huey", "Huey")]) == ""


def test_cpu_scaling_target_is_a_quarter_more_than_one_process():
    for workers in (2, 4):
        met = _metric(f"cpu_scaling_w{workers}_ratio").met
        assert met(1.25, {}) is True
        assert met(1.26, {}) is False


def test_scaling_table_has_a_column_per_worker_count_and_the_ratio_row():
    summaries = {"atf": {"scaling_w1": _summary(1000), "scaling_w4": _summary(1400),
                         "cpu_scaling_w1_worker": _summary(500),
                         "cpu_scaling_w4_worker": _summary(640),
                         "cpu_scaling_w4_redis": _summary(60),
                         "cpu_scaling_w1_total": _summary(500),
                         "cpu_scaling_w4_total": _summary(700),
                         "cpu_scaling_w1_ratio": _summary(1.0),
                         "cpu_scaling_w4_ratio": _summary(1.4)}}
    lines = report.scaling_table(summaries).splitlines()
    assert lines[0] == "| per drained task | 1 worker process | 4 worker processes |"
    assert lines[2] == "| drain (tasks/s) | 1,000 | 1,400 |"
    assert "| worker processes (µs) | 500 | 640 |" in lines
    assert "| Redis server (µs) | — | 60 |" in lines
    assert not any(line.startswith("| consumer") for line in lines)  # measured in none
    assert lines[-1] == "| all of them ÷ one process's (target ≤ 1.25×) | 1.00 | 1.40 |"
    assert report.scaling_table({"atf": {"drain": _summary(1000)}}) == ""


def test_shard_targets_are_the_issues():
    assert _metric("shard_s2_efficiency").met(0.9, {}) is True
    assert _metric("shard_s2_efficiency").met(0.89, {}) is False
    assert _metric("shard_s3_efficiency").met(0.85, {}) is True
    assert _metric("shard_s3_efficiency").met(0.84, {}) is False
    assert _metric("shard_s3_pipeline_ratio").met(1.10, {}) is True
    assert _metric("shard_s3_pipeline_ratio").met(1.11, {}) is False


def test_shard_table_has_a_column_per_count_and_each_slot_in_its_cell():
    figures = {"shard_s1": 400, "shard_s2": 760, "shard_s1_efficiency": 1.0,
               "shard_s2_efficiency": 0.95, "shard_s1_slot0_rate": 400,
               "shard_s2_slot0_rate": 390, "shard_s2_slot1_rate": 371,
               "shard_s2_slot1_wal_bytes": 3300, "shard_s1_pipeline_cpu_us": 1000,
               "shard_kill_before": 760, "shard_kill_after": 380, "shard_kill_ratio": 0.5,
               "shard_kill_shards": 2, "shard_s1_first": 380, "shard_s1_last": 420}
    summaries = {"atf": {key: _summary(value) for key, value in figures.items()}}
    text = report.shard_table(summaries)
    lines = text.splitlines()
    assert lines[-3] == ("One shard's figures are the mean of its drain before the other counts' "
                         "(380 tasks/s) and its drain after them (420 tasks/s).")
    assert lines[0] == "| figure | 1 shard | 2 shards |"
    assert lines[2] == "| drain, all shards (tasks/s) | 400 | 760 |"
    assert "| each shard's drain, by slot (tasks/s) | 400 | 390 / 371 |" in lines
    assert "| each cluster's WAL per task of its own, by slot (B) | — | — / 3,300 |" in lines
    assert any(line.startswith("| scaling efficiency") and line.endswith("| 1.00 | 0.95 |")
               for line in lines)
    assert any(line.startswith("| pipeline's CPU per task: ") and line.endswith("| 1,000 | — |")
               for line in lines)
    assert lines[-1] == ("One of 2 shards' servers stopped once a third of the other shards' "
                         "tasks were done: those shards drained 760 tasks/s before and 380 "
                         "after (0.50×).")
    assert report.shard_table({"atf": {"drain": _summary(1000)}}) == ""
    kill_only = {key: value for key, value in summaries["atf"].items() if "kill" in key}
    assert report.shard_table({"atf": kill_only}) == lines[-1]
