"""A real parallel run (pytest-xdist, as `make test` runs the suite): each worker process has
its own test database, Redis database, queue prefix and ports, and the two phases split the
tests marked `serial` from the others (tests/parallel.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

#: A test every worker runs (`--dist each`): it writes down what its process got.
RECORDING_TEST = '''
import json, os
from pathlib import Path

import pytest
from django.conf import settings

from tasks_core.conf import atf_settings
from tests.ports import free_port


def test_records_what_this_worker_got(django_db_modify_db_settings):
    worker = os.environ.get("PYTEST_XDIST_WORKER", "none")
    Path(os.environ["RECORDS"], worker).write_text(json.dumps({
        "redis": settings.REDIS_URL,
        "prefix": atf_settings.queue_prefix,
        "database": settings.DATABASES["default"]["TEST"]["NAME"],
        "ports": [free_port() for _ in range(3)],
    }))


@pytest.mark.serial
def test_marked_serial():
    pass
'''


def pytest_run(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """pytest on `directory`'s test module, with the suite's settings and plugins."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "PYTHONPATH": str(ROOT),
           "REDIS_URL": "redis://127.0.0.1:6379/15", "ATF_QUEUE_PREFIX": "atftest",
           "ATF_TEST_DATABASE_NAME": "test_records", "RECORDS": str(directory / "records")}
    for inherited in ("ATF_TEST_REDIS_DATABASES", "PYTEST_XDIST_WORKER"):  # a run of its own
        env.pop(inherited, None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "tests.parallel",
         "-o", "markers=serial: alone", "--rootdir", str(directory), "-c", "/dev/null",
         *args, str(directory / "test_records.py")],
        cwd=directory, env=env, capture_output=True, text=True, timeout=120)


def test_each_worker_keeps_its_databases_prefix_and_ports_to_itself(tmp_path: Path) -> None:
    # Given a test that writes down the settings and ports its process got
    (tmp_path / "test_records.py").write_text(RECORDING_TEST)
    (tmp_path / "records").mkdir()
    # When two xdist workers each run it, in the parallel phase
    run = pytest_run(tmp_path, "-n", "2", "--dist", "each", "--phase=parallel")
    assert run.returncode == 0, run.stdout + run.stderr
    got = {path.name: json.loads(path.read_text())
           for path in (tmp_path / "records").iterdir()}
    # Then each has a test database, a Redis database and a queue prefix of its own
    assert {worker: (record["database"], record["redis"], record["prefix"])
            for worker, record in got.items()} == {
        "gw0": ("test_records_gw0", "redis://127.0.0.1:6379/1", "atftest-gw0"),
        "gw1": ("test_records_gw1", "redis://127.0.0.1:6379/2", "atftest-gw1"),
    }
    # And ports from a block of its own, below the kernel's ephemeral range
    assert all(20000 <= port < 21000 for port in got["gw0"]["ports"])
    assert all(21000 <= port < 22000 for port in got["gw1"]["ports"])
    # And the test marked serial was left to the serial phase
    assert "2 workers [1 item]" in run.stdout, run.stdout


def test_the_serial_phase_runs_only_the_tests_marked_serial(tmp_path: Path) -> None:
    (tmp_path / "test_records.py").write_text(RECORDING_TEST)
    (tmp_path / "records").mkdir()
    run = pytest_run(tmp_path, "-p", "no:xdist", "--phase=serial", "-v")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "test_marked_serial PASSED" in run.stdout, run.stdout
    assert "1 passed, 1 deselected" in run.stdout, run.stdout
    assert list((tmp_path / "records").iterdir()) == []
