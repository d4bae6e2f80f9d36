"""`runworker --processes N`: a parent that runs N worker processes and restarts any that die."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

from tasks_core.conf import atf_settings

logger = logging.getLogger(__name__)

#: Seconds before a child that died is started again (a crash loop stays slow).
RESTART_DELAY_S = 1.0


class Supervisor:
    def __init__(self, child_args: Sequence[str], *, processes: int) -> None:
        self.command = [sys.executable, sys.argv[0], *child_args]
        self.children: list[subprocess.Popen | None] = [None] * processes
        self._stop = threading.Event()

    def _start(self, slot: int) -> None:
        child = subprocess.Popen(self.command)
        self.children[slot] = child
        logger.info("worker process %d started (pid %d)", slot, child.pid)

    def run(self) -> None:
        for slot in range(len(self.children)):
            self._start(slot)
        while not self._stop.wait(RESTART_DELAY_S):
            for slot, child in enumerate(self.children):
                if child is not None and child.poll() is not None:
                    logger.warning("worker process %d (pid %d) exited with %s; restarting", slot,
                                   child.pid, child.returncode)
                    self._start(slot)
        self._stop_children()

    def _stop_children(self) -> None:
        alive = [c for c in self.children if c is not None and c.poll() is None]
        for child in alive:
            child.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + atf_settings.shutdown_grace_s + 10
        for child in alive:
            try:
                child.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                logger.warning("worker process %d did not stop in time; killing it", child.pid)
                child.kill()

    def stop(self) -> None:
        self._stop.set()

    def kill(self) -> None:
        """Second signal: end the children at once."""
        for child in self.children:
            if child is not None and child.poll() is None:
                child.kill()
