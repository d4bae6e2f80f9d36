"""`runworker --reload`: a worker that restarts when the project's code changes (Django's
autoreloader), stopping gracefully each time, and that Ctrl-C stops."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tasks_core import atf
from tasks_core.models import TaskEntity, Worker
from tests.conftest import ROOT, Processes, subprocess_env, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

#: A module every worker of the test project imports: the demo lambdas.
WATCHED = ROOT / "demo" / "lambdas.py"


@pytest.fixture
def touch() -> Iterator[Callable[[], None]]:
    """Moves WATCHED's modification time a second on (not its text) at each call, and puts it
    back afterwards."""
    before = WATCHED.stat()
    yield lambda: os.utime(WATCHED, ns=(before.st_atime_ns, WATCHED.stat().st_mtime_ns + 10**9))
    os.utime(WATCHED, ns=(before.st_atime_ns, before.st_mtime_ns))


def _succeeded() -> int:
    return TaskEntity.objects.filter(status="success").count()


def test_a_reloading_worker_restarts_on_a_code_change_and_keeps_serving(
        processes: Processes, touch: Callable[[], None]) -> None:
    # Given a consumer and a worker started with --reload
    env = subprocess_env(ATF_POLL_INTERVAL_S="0.2")
    processes.start("runconsumer", env=env)
    worker = processes.start("runworker", "demo.noop", "--threads", "1", "--reload", env=env)
    log = Path(worker.log_path)  # type: ignore[attr-defined]
    atf.schedule("demo.noop")
    wait_for(lambda: _succeeded() == 1, timeout_s=60, message="the first task to succeed")
    # When a module the worker imported changes (again each second: the reloader may not
    # have taken its first look at the files yet, and then a change is not one)
    def restarted() -> bool:
        touch()
        return log.read_text().count("started: 1 thread(s) for demo.noop") >= 2

    wait_for(restarted, timeout_s=60, interval_s=1.0, message="a second worker start")
    # Then the worker stopped gracefully (marked stopped) and a new one started
    assert "the code changed: restarting the worker" in log.read_text()
    assert Worker.objects.order_by("started_at").first().stopped_at is not None
    # and it serves tasks as before
    atf.schedule("demo.noop")
    wait_for(lambda: _succeeded() == 2, timeout_s=60, message="a task after the restart")
    # When Ctrl-C reaches the command's process group, as from a terminal
    os.killpg(worker.pid, signal.SIGINT)
    # Then the worker stops gracefully and the command exits 0
    assert worker.wait(timeout=60) == 0
    assert not Worker.objects.filter(stopped_at__isnull=True).exists()
