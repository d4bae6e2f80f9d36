"""`runworker --reload`: the command's exit status for its child's, and a stop that comes while the
child's worker is still being built."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from workers import reloading

#: Interrupted starts of Python the status test sends at most, and for how long.
TRIES = 200
TRIES_S = 15.0


@pytest.fixture
def ctrl_c_reached_the_command() -> Iterator[None]:
    reloading._ctrl_c.set()
    yield
    reloading._ctrl_c.clear()


def _statuses_of_pythons_interrupted_as_they_initialise() -> set[int]:
    """The statuses Python ends with on a SIGINT that comes during its initialisation or its
    first instructions: 1 where the signal lands before it can raise KeyboardInterrupt (about
    one start in twenty here), -SIGINT after. Starts are sent until a 1 was seen, for at most
    TRIES starts or TRIES_S seconds (a busy machine starts Pythons slowly); each child's own
    work is short, so a signal that came too late costs it a fraction of a second (status 0)."""
    statuses: set[int] = set()
    give_up_at = time.monotonic() + TRIES_S
    for _ in range(TRIES):
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.2)"],
                                 stderr=subprocess.DEVNULL)
        child.send_signal(signal.SIGINT)
        statuses.add(child.wait(timeout=30))
        if 1 in statuses or time.monotonic() > give_up_at:
            break
    return statuses


@pytest.mark.usefixtures("ctrl_c_reached_the_command")
@pytest.mark.parametrize("child_status", [-signal.SIGINT, 1, 0])
def test_a_child_that_ctrl_c_ended_as_it_started_was_stopped_as_asked(child_status: int) -> None:
    assert reloading._command_status(child_status) == 0


@pytest.mark.usefixtures("ctrl_c_reached_the_command")
def test_every_status_python_ends_with_on_an_early_ctrl_c_counts_as_stopped() -> None:
    statuses = _statuses_of_pythons_interrupted_as_they_initialise()
    assert {status: reloading._command_status(status) for status in statuses} == dict.fromkeys(
        statuses, 0)


@pytest.mark.parametrize(("child_status", "command_status"),
                         [(1, 1), (-signal.SIGINT, 128 + signal.SIGINT),
                          (-signal.SIGKILL, 128 + signal.SIGKILL), (2, 2)])
def test_without_ctrl_c_the_child_status_is_the_command_status(child_status: int,
                                                                command_status: int) -> None:
    assert reloading._command_status(child_status) == command_status


def test_a_stop_that_comes_while_the_worker_is_being_built_stops_it_once_built() -> None:
    # Given the child's worker thread, still building its worker when Ctrl-C comes
    building = threading.Event()
    stopped = threading.Event()

    def work(on_stop: reloading.OnStop) -> int:
        building.wait(timeout=30)
        on_stop(stopped.set)
        return 0 if stopped.wait(timeout=30) else 1

    running = reloading._Work(work)
    thread = threading.Thread(target=running.main)
    thread.start()
    running.started.wait(timeout=30)
    # When the stop comes before the worker registered how to stop it
    stopper = threading.Thread(target=running.stop)
    stopper.start()
    wait_until = time.monotonic() + 30
    while not running.stopping and time.monotonic() < wait_until:
        time.sleep(0.001)
    building.set()
    stopper.join(timeout=30)
    thread.join(timeout=30)
    # Then the worker is stopped as soon as it is built, and the stop returns once it has ended
    assert stopped.is_set()
    assert running.done.is_set()
    assert not stopper.is_alive()


def test_a_stop_in_the_commands_own_process_returns_at_once() -> None:
    # Given the command's process, where the worker never runs
    running = reloading._Work(lambda on_stop: 0)
    # When it stops (its child ended), Then it does not wait for a worker of its own
    running.stop()
    assert not running.done.is_set()
