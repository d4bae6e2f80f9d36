"""The short chaos run inside the test suite: ~2,000 tasks, every fault once, real processes.

It runs `python -m tests.chaos short` as a child with its own database (this run's test
database name plus `_chaos`) and its own redis-server, every process connecting through a
PgBouncer of its own in transaction mode, and passes when the runner's checks pass: nothing
lost, no overlapping executions, nothing run after it finished, every fault injected (the
pooler's restart among them). A second, shorter run keeps the tasks in three shards of its own
and injects the shard faults alone.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from tests.chaos.faults import FAULTS

ROOT = Path(__file__).resolve().parents[2]
SHARD_FAULTS = ["shard-kill", "shard-failover", "shard-cut"]

pytestmark = [pytest.mark.slow, pytest.mark.drill]


def run_chaos(database: str, tmp_path: Path, *options: str,
              timeout_s: float = 360) -> tuple[int, str, str]:
    """`python -m tests.chaos short` on `database` with `options`: its exit status, its output
    (stdout and the end of stderr), and its summary line."""
    result = subprocess.run(
        [sys.executable, "-m", "tests.chaos", "short", "--database", database,
         "--log-dir", str(tmp_path / "logs"), *options],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout_s,
    )
    output = result.stdout + result.stderr[-3000:]
    summary = next((line for line in reversed(result.stdout.splitlines())
                    if line.startswith("lost=")), "")
    return result.returncode, output, summary


def test_short_chaos_run_loses_nothing_and_never_overlaps(tmp_path: Path) -> None:
    # Given a database and a log directory of this test run's own
    # When the short chaos run schedules its tasks and injects every fault once, behind a
    # transaction-mode pooler, each about a second after the last one recovered (most land
    # while its tasks are still being scheduled)
    status, output, summary = run_chaos(f"{settings.ATF_TEST_DATABASE_NAME}_chaos", tmp_path,
                                        "--pooler", "transaction", "--fault-interval", "1")
    # Then it reports nothing lost, nothing overlapping, nothing run after it finished
    assert status == 0, output
    assert summary.startswith("lost=0 overlapping=0 ran_after_finish=0 not_success=0"), output
    # And every fault type was injected, and did what it should
    kinds = len(FAULTS) - 1 - len(SHARD_FAULTS)  # pg-failover needs a standby, shard-* shards
    assert "pooler-restart   ok" in output, output
    assert f"faults={kinds}/{kinds}" in summary, output


def test_short_chaos_run_on_three_shards_survives_a_shard_killed_failed_over_and_cut(
        tmp_path: Path) -> None:
    # Given three shards of the run's own, each a primary and a synchronous standby, served
    # by one consumer, three direct workers and a remote one (fewer processes, a shorter run)
    # When 600 tasks are scheduled while one shard is killed, one fails over and worker 0's
    # link to one is cut
    status, output, summary = run_chaos(
        f"{settings.ATF_TEST_DATABASE_NAME}_chaos_shards", tmp_path, "--shards", "3",
        "--faults", ",".join(SHARD_FAULTS), "--tasks", "600", "--fault-interval", "1.5",
        "--consumers", "1", "--workers", "3", "--remote-workers", "1", timeout_s=240)
    # Then nothing is lost, nothing ran twice at once, no acknowledged schedule vanished
    assert status == 0, output
    counts = dict(item.split("=", 1) for item in summary.split())
    assert (counts["lost"], counts["overlapping"], counts["vanished"]) == ("0", "0", "0"), output
    assert counts["ran_after_finish"] == counts["not_success"] == "0", output
    # And each shard fault was injected and did what it should
    assert counts["faults"] == "3/3", output
    for name in SHARD_FAULTS:
        assert f"{name:16s} ok" in output or f"{name:16s} crossed" in output, output
