"""The sharded store's benchmark harness, end to end with tiny counts (`make bench --shards`).

`python -m bench.run --only shard_scaling --shards 2` as `make bench` runs it (the peers'
virtualenv, bench/.venv-peers, which `make bench` makes; the test is skipped without it): two
private PostgreSQL clusters in CPU quotas of their own (root and the cgroup v1 cpu hierarchy;
skipped without them), ATF configured through ATF_SHARD_URLS, the drain and the lateness after
it, the figures in latest.json and the table in latest.md, and no cgroup left behind. (The
shard kill, `shard_kill`, needs a drain long enough to be stopped mid-way: minutes, left to
`make bench`.)
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from bench import cpu_quota, report, shard_figures
from tests.conftest import ROOT

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not cpu_quota.available(),
                                 reason="the shard bench's CPU quotas need root and cgroup v1")]

PEERS_PYTHON = ROOT / "bench" / ".venv-peers" / "bin" / "python"
TASKS = 400


def _quota_groups() -> set[str]:
    return {path.name for path in cpu_quota.HIERARCHY.glob("atf-bench-*")}


def _bench(results: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    if not PEERS_PYTHON.exists():
        pytest.skip("bench/.venv-peers is missing (make bench makes it)")
    prefix = f"{os.environ.get('ATF_TEST_DATABASE_NAME', 'test')}_bench"
    return subprocess.run([str(PEERS_PYTHON), "-m", "bench.run", "--quick", "--systems", "atf",
                           "--tasks", str(TASKS), "--db-prefix", prefix, "--results",
                           str(results), *arguments],
                          cwd=ROOT, capture_output=True, text=True, timeout=540, check=False)


@pytest.mark.timeout(600)
def test_two_shards_drain_in_their_quotas(tmp_path: Path) -> None:
    groups_before = _quota_groups()
    done = _bench(tmp_path, "--only", "shard_scaling", "--shards", "2", "--shard-cpu", "0.5")
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads((tmp_path / "latest.json").read_text())
    assert not [note for note in document["notes"] if "failed" in note or "only" in note]
    ours = {name: figure["median"] for name, figure in document["results"]["atf"].items()}
    assert ours[shard_figures.rate_key(2)] > 0
    assert ours[shard_figures.key(2, "pipeline_cpu_us")] > 0
    assert ours[shard_figures.key(2, "immediate_p50")] >= 0
    for slot in (0, 1):  # the backlog split evenly, and each cluster served its own
        assert ours[shard_figures.slot_key(2, slot, "tasks")] == TASKS / 2
        for part in ("rate", "pg_cpu_us", "wal_bytes", "conns"):
            assert ours[shard_figures.slot_key(2, slot, part)] > 0, (slot, part)
    assert report.SHARD_TITLE in (tmp_path / "latest.md").read_text()
    assert _quota_groups() == groups_before  # each shard's cgroup is removed
