"""`runworker --reload`, for development: the worker restarts when the project's code changes,
with Django's own autoreloader, as `runserver` does.

The command's process only starts a child and starts it again each time the child exits for a
change (status 3). In the child, Django's reloader keeps the main thread to watch the files of
every imported module, so the worker runs in a thread of its own. A change, SIGTERM or Ctrl-C
reach the watching thread, which stops the worker as a first signal would (buffered tasks
handed back, running ones given ATF_SHUTDOWN_GRACE_S) before the child exits; a second one
exits at once. Ctrl-C, which a terminal sends to both processes, is left to the child.

Code that cannot be imported, or a lambda named on the command line that the code no longer
registers, does not end the command (as in `runserver`): the child says why in one line and
waits for the next change (`tasks_core.discovery`).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType

from django.core.management.base import CommandError
from django.utils import autoreload

logger = logging.getLogger(__name__)

#: What the worker is given to register the function that stops it.
OnStop = Callable[[Callable[[], None]], None]
#: The exit status with which Django's reloader asks for a restart.
RESTART = 3


class _Work:
    """The worker's thread in the child: runs it, and stops it for the watching thread."""

    def __init__(self, work: Callable[[OnStop], int]) -> None:
        self.work = work
        self.stop_work: Callable[[], None] | None = None
        self.started = threading.Event()
        self.stopping = False
        self.done = threading.Event()
        self._lock = threading.Lock()

    def main(self) -> None:
        self.started.set()
        try:
            if exit_code := self.work(self.on_stop):
                logger.error("worker exited with status %d; it starts again when the code "
                             "changes", exit_code)
        except CommandError as exc:
            logger.error("%s; the worker starts again when the code changes", exc)
        finally:
            self.done.set()

    def on_stop(self, stop: Callable[[], None]) -> None:
        """The worker's stop, once it is built; called at once if a stop came while it was
        being built (a Ctrl-C as the child starts: the worker would otherwise run on)."""
        with self._lock:
            self.stop_work = stop
            stopping = self.stopping
        if stopping:
            stop()

    def stop(self) -> None:
        """Stop the worker, if its thread started (also while it is still being built), and
        wait until it has."""
        with self._lock:
            self.stopping = True
            stop_work = self.stop_work
        if not self.started.is_set() or self.done.is_set():
            return
        if stop_work is not None:
            stop_work()
        self.done.wait()


def in_worker_process() -> bool:
    """Whether this is the child, which runs the worker (not the command's own process)."""
    return os.environ.get(autoreload.DJANGO_AUTORELOAD_ENV) == "true"


#: Set in the command's process once Ctrl-C reached it.
_ctrl_c = threading.Event()


def _leave_ctrl_c_to_the_child(signum: int, frame: FrameType | None) -> None:
    """The command's process waits for its child, which Ctrl-C stops."""
    _ctrl_c.set()


#: How a child that Ctrl-C ended while it started exits: Python's KeyboardInterrupt (-SIGINT),
#: or 1 when the signal came during the interpreter's own initialisation ("Fatal Python error:
#: init_sys_streams"), before Python could raise it.
_ENDED_BY_CTRL_C_AS_IT_STARTED = frozenset({-signal.SIGINT, 1})


def _command_status(child_status: int) -> int:
    """The command's exit status for its child's: a child that Ctrl-C ended while it started
    (before the worker could stop gracefully) was stopped as asked; another signal's status is
    the shell's, 128 + its number."""
    if child_status in _ENDED_BY_CTRL_C_AS_IT_STARTED and _ctrl_c.is_set():
        return 0
    return 128 - child_status if child_status < 0 else child_status


def run(work: Callable[[OnStop], int]) -> None:
    """Run `work` (which builds a worker, registers its stop with the OnStop it is given and
    returns its exit status) in a child process that restarts when the code changes."""
    # Ctrl-C, which a terminal sends to both processes, is the child's to handle (Python's
    # KeyboardInterrupt, from its first instruction on): the parent catches it, notes it and
    # waits for the child. Not SIG_IGN, which the child would inherit: a Ctrl-C while it
    # starts would be lost, and the command would go on. A handler is not inherited.
    if not in_worker_process():
        signal.signal(signal.SIGINT, _leave_ctrl_c_to_the_child)
    running = _Work(work)
    try:
        autoreload.run_with_reloader(running.main)
    except SystemExit as exit_:
        if exit_.code == RESTART:
            logger.info("the code changed: restarting the worker")
        running.stop()
        if not in_worker_process() and isinstance(exit_.code, int):
            raise SystemExit(_command_status(exit_.code)) from None
        raise
    running.stop()  # Ctrl-C: Django's reloader returns
