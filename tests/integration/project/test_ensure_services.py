"""`ensure_services.py SERVICE -- COMMAND` (make demo): a Redis it started for the command stops
when the command ends, Ctrl-C included; a Redis that was already running is left alone."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings

from tests.conftest import ROOT, wait_for
from tests.ports import free_port

ENSURE = [sys.executable, str(ROOT / "scripts" / "ensure_services.py"), "redis", "--"]
#: The command under it: says it runs, then waits (as the demo does) until it is stopped.
WAIT = [sys.executable, "-c", "import time; print('running', flush=True); time.sleep(60)"]


def answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def start(redis_url: str, log: Path) -> subprocess.Popen:
    """The wrapper and its command in a process group of their own, as a terminal runs them:
    with Ctrl-C's default action (a run started in the background of a shell without job
    control, as a CI script may, has SIGINT ignored, and every child inherits that)."""
    return subprocess.Popen(ENSURE + WAIT, env={**os.environ, "REDIS_URL": redis_url},
                            stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


@pytest.fixture
def port() -> Iterator[int]:
    """A free port for a Redis the script starts; that Redis and its files go at the end."""
    port = free_port()
    yield port
    workdir = ROOT / "var" / f"redis-{port}"
    with contextlib.suppress(OSError, ValueError):
        os.kill(int((workdir / "redis.pid").read_text()), signal.SIGKILL)  # left by a failure
    shutil.rmtree(workdir, ignore_errors=True)


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")
def test_ctrl_c_stops_the_redis_it_started(tmp_path: Path, port: int) -> None:
    # Given a command run with a Redis that nothing served before
    log = tmp_path / "out.log"
    wrapper = start(f"redis://127.0.0.1:{port}/0", log)
    wait_for(lambda: "running" in log.read_text(), timeout_s=30, message="the command")
    assert answers(port)
    # When Ctrl-C reaches the terminal's process group
    os.killpg(wrapper.pid, signal.SIGINT)
    # Then the command ends, and the Redis it was given is stopped
    assert wrapper.wait(timeout=30) != 0
    assert not answers(port), log.read_text()
    assert f"redis-server on 127.0.0.1:{port}: stopped" in log.read_text()


def test_a_redis_that_was_running_is_left_running(tmp_path: Path) -> None:
    log = tmp_path / "out.log"
    wrapper = start(settings.REDIS_URL, log)
    wait_for(lambda: "running" in log.read_text(), timeout_s=30, message="the command")
    wrapper.send_signal(signal.SIGTERM)  # passed on to the command
    assert wrapper.wait(timeout=30) != 0
    assert answers(int(settings.REDIS_URL.split(":")[2].split("/")[0]))
    assert "stopped" not in log.read_text()
