"""The chaos runner's own judgements: overlap detection, percentiles, the soak criteria,
whether a replaced worker came back, and a fault crossed by a crash task of the load."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from demo import CRASH_EXIT_STATUS
from tests.chaos import cpu
from tests.chaos.cluster import Child, Cluster
from tests.chaos.faults import FaultEvent, Lab, _cut
from tests.chaos.records import Execution
from tests.chaos.services import wait_until
from tests.chaos.soak import MB, Window, judge
from tests.chaos.verify import count_overlaps, percentiles
from workers.replacement import REPLACING


def run(task_id: int, start: float, end: float, attempt: int = 1) -> Execution:
    return Execution(task_id=task_id, attempt=attempt, start=start, end=end, pid=1)


@pytest.mark.parametrize(("runs", "overlaps"), [
    ([run(1, 0, 1)], 0),
    ([run(1, 0, 1), run(1, 1, 2, 2)], 0),  # one ends as the next starts: not at the same time
    ([run(1, 0, 1), run(1, 0.5, 2, 2)], 1),
    ([run(1, 0, 10), run(1, 2, 3, 2), run(1, 4, 5, 3)], 2),  # both inside a long first run
    ([run(1, 0, 1), run(2, 0.5, 2)], 0),  # different tasks may run together
    ([run(1, 3, 4, 2), run(1, 0, 3.5)], 1),  # records arrive in any order
])
def test_count_overlaps(runs: list[Execution], overlaps: int) -> None:
    assert len(count_overlaps(runs)) == overlaps


def test_percentiles_of_nothing_and_of_one_value() -> None:
    assert percentiles([]) == {"p50": 0.0, "p90": 0.0, "p99": 0.0, "max": 0.0}
    assert percentiles([2.0]) == {"p50": 2.0, "p90": 2.0, "p99": 2.0, "max": 2.0}


def test_percentiles_of_a_range() -> None:
    values = [float(n) for n in range(1, 101)]
    result = percentiles(values)
    assert (round(result["p50"]), round(result["p90"]), result["max"]) == (50, 90, 100.0)


def windows(worker_mb: list[float], latency_s: list[float]) -> list[Window]:
    return [Window(ended_s=10.0 * (i + 1), finished=100, latencies=[latency] * 50, backlog=0,
                   rss={"worker": int(size * MB)})
            for i, (size, latency) in enumerate(zip(worker_mb, latency_s, strict=True))]


def test_a_flat_soak_passes() -> None:
    assert judge(windows([100.0] * 12, [0.05] * 12), duration_s=120) == []


def test_memory_that_keeps_growing_fails() -> None:
    # Given worker memory that grows 10 MB every window
    failures = judge(windows([100.0 + 10 * i for i in range(12)], [0.05] * 12), duration_s=120)
    assert failures and "memory of worker" in failures[0]


def test_latency_that_drifts_upward_fails() -> None:
    failures = judge(windows([100.0] * 12, [0.05] * 6 + [1.0] * 6), duration_s=120)
    assert failures and "latency drifted" in failures[0]


def test_a_soak_too_short_to_judge_passes_without_judging() -> None:
    assert judge(windows([100.0, 500.0, 900.0], [0.05, 5.0, 50.0]), duration_s=30) == []


def test_a_child_is_back_once_its_fresh_image_logged_its_ready_line(tmp_path: Path) -> None:
    lines = ["worker w1 started", f"CRITICAL {REPLACING} with a fresh one (pid 1 stays): cut"]
    script = "import sys, time; print(sys.argv[1], flush=True); time.sleep(30)"
    child = Child("worker", 0, [sys.executable, "-c", script, "\n".join(lines)], {}, tmp_path)
    child.start()
    try:
        wait_until(lambda: child.replacements() == 1, timeout_s=10, what="the child's log")
        assert not child.back_after_replacement()  # its ready line came before the replacement
        assert not child.ready()  # nor may a fault start on it while it waits to come back
        with open(child.log_path, "a") as log:
            log.write("worker w1 started\n")
        assert child.back_after_replacement()
        assert child.ready()
    finally:
        child.kill()


#: A worker stand-in: ready at once; when the cut (a file) comes, its first run exits with
#: argv[2], as a crash task of the load (or a worker that gave up) would; a later run serves.
_EXITS_ON_CUT = """
import os, sys, time
print("worker w1 started", flush=True)
cut = sys.argv[1]
while not os.path.exists(cut):
    time.sleep(0.02)
if not os.path.exists(cut + ".seen"):
    open(cut + ".seen", "w").close()
    sys.exit(int(sys.argv[2]))
time.sleep(30)
"""


@pytest.mark.parametrize(("status", "crossed", "ok"), [
    (CRASH_EXIT_STATUS, True, True),  # a crash task ended it: crossed, and it served again
    (76, False, False),  # it gave up (a hung lambda's old exit): the fault failed
])
def test_a_cut_whose_worker_a_crash_task_ended_is_crossed_not_failed(
        tmp_path: Path, status: int, crossed: bool, ok: bool) -> None:
    cut_file = tmp_path / "cut"
    cluster = Cluster(env={"REDIS_URL": "redis://127.0.0.1:1/0"}, database_nodes=[], workers=0,
                      consumers=0, threads=1, log_dir=tmp_path, api=False)
    child = Child("worker", 0, [sys.executable, "-c", _EXITS_ON_CUT, str(cut_file),
                                str(status)], {}, tmp_path)
    cluster.children.append(child)
    # Only the cluster and the heartbeat interval are what a cut acts on.
    lab = Lab(cluster=cluster, redis=None, database=None, records=None, victims=None,
              rng=random.Random(0), heartbeat_interval_s=0.2)  # type: ignore[arg-type]
    event = FaultEvent(name="api-cut", started=0.0)
    child.start()
    try:
        _cut(lab, event, child, cut_file.touch, lambda: None)
        assert (event.crossed, event.ok) == (crossed, ok), event.detail
        assert f"exit status {status}" in event.detail or crossed
        assert child.alive()  # started again either way
    finally:
        child.kill()


def test_the_processor_a_group_used_counts_its_children_in_their_own_group() -> None:
    # Given a child of this process that spins for 0.4 s of processor time, then sleeps (the
    # kernel's /proc times are whole ticks, rounded down: a 0.3 s spin could read 0.29 forever)
    child = subprocess.Popen([sys.executable, "-c",
                              "import time\nend = time.process_time() + 0.4\n"
                              "while time.process_time() < end: pass\ntime.sleep(30)"])
    try:
        wait_until(lambda: cpu.sample({"child": child.pid}, "none")["child"] >= 0.3,
                   timeout_s=10, what="the child's 0.3 s")
        # Then its time is its group's, and the parent's group counts the parent's own time
        # (at least: the suite's own servers, children of this process too, add theirs)
        own = time.process_time()
        used = cpu.sample({"parent": os.getpid(), "child": child.pid}, "none")
        assert 0.3 <= used["child"] < 1.0
        assert used["parent"] >= own - 0.05
    finally:
        child.kill()
        child.wait()
