"""The exit status of `runworker --reload` for the status its child process ended with."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from workers import reloading


@pytest.fixture
def ctrl_c_reached_the_command() -> Iterator[None]:
    reloading._ctrl_c.set()
    yield
    reloading._ctrl_c.clear()


def _status_of_a_python_interrupted_as_it_initialises() -> int:
    """Python's own status for a SIGINT that came during its initialisation, or during its
    first instruction: sent until one lands before the interpreter can raise KeyboardInterrupt."""
    statuses = set()
    for _ in range(200):
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"],
                                 stderr=subprocess.DEVNULL)
        child.send_signal(signal.SIGINT)
        statuses.add(child.wait())
        if 1 in statuses:
            break
    return 1 if 1 in statuses else -signal.SIGINT


@pytest.mark.usefixtures("ctrl_c_reached_the_command")
@pytest.mark.parametrize("child_status", [-signal.SIGINT, 1, 0])
def test_a_child_that_ctrl_c_ended_as_it_started_was_stopped_as_asked(child_status: int) -> None:
    assert reloading._command_status(child_status) == 0


@pytest.mark.usefixtures("ctrl_c_reached_the_command")
def test_every_status_python_ends_with_on_an_early_ctrl_c_counts_as_stopped() -> None:
    assert reloading._command_status(_status_of_a_python_interrupted_as_it_initialises()) == 0


@pytest.mark.parametrize(("child_status", "command_status"),
                         [(1, 1), (-signal.SIGINT, 128 + signal.SIGINT),
                          (-signal.SIGKILL, 128 + signal.SIGKILL), (2, 2)])
def test_without_ctrl_c_the_child_status_is_the_command_status(child_status: int,
                                                                command_status: int) -> None:
    assert reloading._command_status(child_status) == command_status
