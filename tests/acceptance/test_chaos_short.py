"""The short chaos run inside the test suite: ~2,000 tasks, every fault once, real processes.

It runs `python -m tests.chaos short` as a child with its own database (this run's test
database name plus `_chaos`) and its own redis-server, every process connecting through a
PgBouncer of its own in transaction mode, and passes when the runner's checks pass: nothing
lost, no overlapping executions, nothing run after it finished, every fault injected (the
pooler's restart among them).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from tests.chaos.faults import FAULTS

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.drill]


def test_short_chaos_run_loses_nothing_and_never_overlaps(tmp_path: Path) -> None:
    # Given a database and a log directory of this test run's own
    database = f"{settings.ATF_TEST_DATABASE_NAME}_chaos"
    # When the short chaos run schedules its tasks and injects every fault once, behind a
    # transaction-mode pooler
    result = subprocess.run(
        [sys.executable, "-m", "tests.chaos", "short", "--database", database,
         "--pooler", "transaction", "--log-dir", str(tmp_path / "logs")],
        cwd=ROOT, capture_output=True, text=True, timeout=360,
    )
    # Then it reports nothing lost, nothing overlapping, nothing run after it finished
    output = result.stdout + result.stderr[-3000:]
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    if "kept for inspection" in summary:
        summary = result.stdout.strip().splitlines()[-2]
    assert result.returncode == 0, output
    assert summary.startswith("lost=0 overlapping=0 ran_after_finish=0 not_success=0"), output
    # And every fault type was injected, and did what it should
    kinds = len(FAULTS) - 1  # all but pg-failover, which needs a standby (--failover)
    assert "pooler-restart   ok" in output, output
    assert f"faults={kinds}/{kinds}" in summary, output
