"""Shared fixtures: real Redis (its own database, flushed before and after), times, processes."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.db import connection
from django.utils import timezone

from tasks_core import directory, queues

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def redis_client() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.ping()  # a missing server fails loudly here
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


@pytest.fixture
def queue(redis_client: redis.Redis) -> Iterator[queues.QueueBackend]:
    backend = queues.backend()
    yield backend
    backend.close()


@pytest.fixture
def now() -> datetime:
    return timezone.now()


@pytest.fixture(autouse=True)
def _fresh_directory() -> Iterator[None]:
    directory.clear()
    yield
    directory.clear()


def wait_for(condition: Callable[[], object], *, timeout_s: float = 30.0,
             interval_s: float = 0.05, message: str = "condition") -> object:
    """Poll `condition` until it returns something truthy; fail after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s}s waiting for {message}")
        time.sleep(interval_s)


def subprocess_env(**overrides: str) -> dict[str, str]:
    """Environment for a manage.py child that uses this test run's database and Redis."""
    db = connection.settings_dict
    database_url = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "atf_project.settings",
        "DATABASE_URL": database_url,
        "REDIS_URL": settings.REDIS_URL,
        "ATF_QUEUE_PREFIX": settings.ATF_QUEUE_PREFIX,
        "ATF_LOG_LEVEL": "INFO",
        "PYTHONUNBUFFERED": "1",
    }
    env.update(overrides)
    return env


class Processes:
    """Starts `manage.py` commands as real child processes; stops them all at teardown."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.children: list[subprocess.Popen] = []

    def start(self, *args: str, env: dict[str, str] | None = None,
              python: str = sys.executable, manage: Path = ROOT / "manage.py") -> subprocess.Popen:
        """`python manage.py *args` in manage.py's directory (this repository's by default)."""
        return self.spawn(args[0], [python, str(manage), *args], env=env, cwd=manage.parent)

    def spawn(self, name: str, argv: list[str], *, env: dict[str, str] | None = None,
              cwd: Path = ROOT) -> subprocess.Popen:
        """Start any command (`start` runs manage.py ones) with its output in a log file."""
        log = open(self.log_dir / f"{name}-{len(self.children)}.log", "w")  # noqa: SIM115
        child = subprocess.Popen(
            argv, cwd=cwd, env=env or subprocess_env(), stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        child.log_path = log.name  # type: ignore[attr-defined]
        self.children.append(child)
        return child

    def stop_all(self) -> None:
        for child in self.children:
            # The whole group: a supervisor's worker processes too.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
        for child in self.children:
            child.wait(timeout=10)

    def logs(self) -> str:
        return "\n".join(
            f"--- {c.args[2:]} ---\n{Path(c.log_path).read_text()[-4000:]}"  # type: ignore[attr-defined]
            for c in self.children
        )


@pytest.fixture
def processes(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Processes]:
    procs = Processes(tmp_path)
    yield procs
    procs.stop_all()
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        print(procs.logs())


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report
