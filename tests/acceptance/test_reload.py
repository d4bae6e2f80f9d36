"""`runworker --reload`: a worker that restarts when the project's code changes (Django's
autoreloader), stopping gracefully each time, that Ctrl-C stops (even while it restarts), and
that broken code or a renamed lambda does not end: it says why in one line and starts again at
the next change."""

from __future__ import annotations

import os
import signal
import subprocess
import textwrap
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


@pytest.fixture
def scratch_project(tmp_path: Path) -> Path:
    """A project of its own (the test project's settings and one more app) whose lambdas.py a
    test may break: its directory, to put on PYTHONPATH."""
    project = tmp_path / "scratch"
    (project / "scratch_app").mkdir(parents=True)
    (project / "scratch_app" / "__init__.py").write_text("")
    (project / "scratch_settings.py").write_text(
        "from atf_project.settings import *  # noqa: F403\n"
        "INSTALLED_APPS = [*INSTALLED_APPS, 'scratch_app']  # noqa: F405\n")
    (project / "scratch_app" / "lambdas.py").write_text(SCRATCH_LAMBDAS)
    return project


SCRATCH_LAMBDAS = textwrap.dedent("""\
    from django.conf import settings

    from tasks_core import atf


    @atf.register("scratch.echo", team=settings.ATF_DEMO_TEAM)
    def echo(ctx, payload):
        return payload
""")


def _log_says(worker: subprocess.Popen, text: str, count: int = 1) -> bool:
    return Path(worker.log_path).read_text().count(text) >= count  # type: ignore[attr-defined]


def _change_until(path: Path, text: str, condition: Callable[[], bool], what: str) -> None:
    """Write `text` to `path`, then move its modification time a second on at each look, a
    tenth of a second apart, until `condition` holds (the reloader may not have taken its first
    look at the files yet; it looks once a second)."""
    path.write_text(text)

    def seen() -> bool:
        if condition():
            return True
        os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
        return False

    wait_for(seen, timeout_s=60, interval_s=0.1, message=what)


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
    # When a module the worker imported changes (again at each look: the reloader may not
    # have taken its first look at the files yet, and then a change is not one)
    def restarted() -> bool:
        touch()
        return log.read_text().count("started: 1 thread(s) for demo.noop") >= 2

    wait_for(restarted, timeout_s=60, interval_s=0.1, message="a second worker start")
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


def test_broken_code_or_a_renamed_lambda_is_said_in_one_line_and_the_worker_waits_for_a_fix(
        processes: Processes, scratch_project: Path) -> None:
    # Given a worker of a lambda of the scratch project, started with --reload
    env = subprocess_env(DJANGO_SETTINGS_MODULE="scratch_settings",
                         PYTHONPATH=f"{scratch_project}{os.pathsep}{ROOT}")
    worker = processes.start("runworker", "scratch.echo", "--threads", "1", "--reload", env=env)
    lambdas = scratch_project / "scratch_app" / "lambdas.py"
    started = "started: 1 thread(s) for scratch.echo"
    wait_for(lambda: _log_says(worker, started), timeout_s=60, message="the worker to start")
    # When lambdas.py gets a syntax error on its line 9
    _change_until(lambdas, SCRATCH_LAMBDAS + "def broken(:\n",
                  lambda: _log_says(worker, "SyntaxError"), "the syntax error to be reported")
    # Then the command says where and what, in one line, and goes on
    wait_for(lambda: _log_says(worker, "the worker starts again when the code changes"),
             timeout_s=10, message="the whole line")
    log = Path(worker.log_path).read_text()  # type: ignore[attr-defined]
    assert f"ERROR MainProcess workers.reloading: {lambdas}:9: SyntaxError: invalid syntax; " \
           "the worker starts again when the code changes" in log
    assert "Traceback" not in log
    assert worker.poll() is None
    # When the code is fixed but the lambda the command names is renamed
    _change_until(lambdas, SCRATCH_LAMBDAS.replace("scratch.echo", "scratch.echoes"),
                  lambda: _log_says(worker, "lambda scratch.echo is not registered"),
                  "the renamed lambda to be reported")
    # Then that is said in one line too, and the command goes on
    assert "Traceback" not in Path(worker.log_path).read_text()  # type: ignore[attr-defined]
    assert worker.poll() is None
    # When the name comes back, the worker starts again
    _change_until(lambdas, SCRATCH_LAMBDAS, lambda: _log_says(worker, started, count=2),
                  "the worker to start again")


#: Ctrl-Cs sent as the worker restarts, each to a command of its own.
CTRL_C_ROUNDS = 2


def _worker_processes(command: subprocess.Popen) -> list[int]:
    """The command's children: the worker process that it starts again at each change."""
    children = Path(f"/proc/{command.pid}/task/{command.pid}/children")
    return [int(pid) for pid in children.read_text().split()]


def _ctrl_c_as_it_restarts(processes: Processes, touch: Callable[[], None]) -> int:
    """Start a reloading worker, change the code, and send Ctrl-C to its process group as soon
    as the new worker process exists; the command's exit status."""
    command = processes.start("runworker", "demo.noop", "--threads", "1", "--reload")
    wait_for(lambda: _log_says(command, "started: 1 thread(s) for demo.noop"), timeout_s=60,
             message="the worker to start")
    first = _worker_processes(command)

    def restarted() -> bool:
        touch()
        return any(pid not in first for pid in _worker_processes(command))

    wait_for(restarted, timeout_s=60, interval_s=0.01, message="a new worker process")
    os.killpg(command.pid, signal.SIGINT)
    try:
        return command.wait(timeout=20)
    except subprocess.TimeoutExpired:
        pytest.fail("the command was still running 20 s after Ctrl-C")


def test_a_ctrl_c_while_the_worker_restarts_stops_the_command_promptly(
        processes: Processes, touch: Callable[[], None]) -> None:
    for _ in range(CTRL_C_ROUNDS):
        # Given a worker started with --reload, when a change restarts it and Ctrl-C reaches
        # the command's process group while the new worker process starts
        status = _ctrl_c_as_it_restarts(processes, touch)
        # Then the command exits at once, as after any Ctrl-C
        assert status == 0
