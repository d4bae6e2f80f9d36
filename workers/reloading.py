"""`runworker --reload`, for development: the worker restarts when the project's code changes,
with Django's own autoreloader, as `runserver` does.

The command's process only starts a child and starts it again each time the child exits for a
change (status 3). In the child, Django's reloader keeps the main thread to watch the files of
every imported module, so the worker runs in a thread of its own. A change, SIGTERM or Ctrl-C
reach the watching thread, which stops the worker as a first signal would (buffered tasks
handed back, running ones given ATF_SHUTDOWN_GRACE_S) before the child exits; a second one
exits at once. Ctrl-C, which a terminal sends to both processes, is left to the child.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable

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
        self.done = threading.Event()

    def main(self) -> None:
        try:
            if exit_code := self.work(self.on_stop):
                logger.error("worker exited with status %d; it starts again when the code "
                             "changes", exit_code)
        except CommandError as exc:
            logger.error("%s; the worker starts again when the code changes", exc)
        finally:
            self.done.set()

    def on_stop(self, stop: Callable[[], None]) -> None:
        self.stop_work = stop

    def stop(self) -> None:
        """Stop the worker, if it started, and wait until it has."""
        if self.stop_work is not None and not self.done.is_set():
            self.stop_work()
            self.done.wait()


def _take_ctrl_c(sender: object, **kwargs: object) -> None:
    """In the child, when Django's reloader starts watching (in the main thread)."""
    signal.signal(signal.SIGINT, signal.default_int_handler)


def run(work: Callable[[OnStop], int]) -> None:
    """Run `work` (which builds a worker, registers its stop with the OnStop it is given and
    returns its exit status) in a child process that restarts when the code changes."""
    # Ctrl-C, which a terminal sends to both processes, is the child's to handle: the parent
    # ignores it, and the child, born ignoring it too, takes it back once it watches the files.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    autoreload.autoreload_started.connect(_take_ctrl_c, dispatch_uid="workers.reloading")
    running = _Work(work)
    try:
        autoreload.run_with_reloader(running.main)
    except SystemExit as exit_:
        if exit_.code == RESTART:
            logger.info("the code changed: restarting the worker")
        running.stop()
        raise
    running.stop()  # Ctrl-C: Django's reloader returns
