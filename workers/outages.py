"""What a long-running process says while a service it needs is down: one warning when the
outage starts, one a minute while it lasts (how long so far, and the latest error), and one
line when it ends (how long it lasted). Not a warning per failed try, several a second.

One OutageLog serves every thread that meets the same outage (a worker's controllers).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

#: Seconds between the warnings that say an outage goes on.
REPEAT_S = 60.0


class OutageLog:
    def __init__(self, logger: logging.Logger, doing: str, *,
                 clock: Callable[[], float] = time.monotonic, repeat_s: float = REPEAT_S) -> None:
        """`doing` says what fails, as in "cannot <doing>" (e.g. "claim tasks")."""
        self.logger = logger
        self.doing = doing
        self.clock = clock
        self.repeat_s = repeat_s
        self._lock = threading.Lock()
        self._since: float | None = None  #: when the outage started; None when there is none
        self._said: float = 0.0  #: when it was last said to go on

    def failed(self, error: object) -> None:
        """A try failed: a warning if it starts an outage, or if the last was a minute ago."""
        with self._lock:
            now = self.clock()
            if self._since is None:
                self._since = self._said = now
                self.logger.warning("cannot %s: %s (said again each minute while it lasts)",
                                    self.doing, error)
            elif now - self._said >= self.repeat_s:
                self._said = now
                self.logger.warning("cannot %s for %.0f s now: %s", self.doing,
                                    now - self._since, error)

    def succeeded(self) -> None:
        """A try succeeded: a line if it ends an outage."""
        if self._since is None:  # the usual case, without taking the lock
            return
        with self._lock:
            if self._since is not None:
                self.logger.warning("can %s again, after %.0f s", self.doing,
                                    self.clock() - self._since)
                self._since = None
