"""SIGTERM/SIGINT handling: the first signal asks to stop, a second one exits at once."""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable
from types import FrameType

logger = logging.getLogger(__name__)


def on_stop(stop: Callable[[], None], *, on_second: Callable[[], None] | None = None,
            hard_exit_code: int = 130) -> None:
    """Call `stop()` on the first SIGTERM or SIGINT; on the second, `on_second()` and exit."""
    received: list[int] = []

    def handle(signum: int, _frame: FrameType | None) -> None:
        if received:
            logger.warning("second %s: exiting now", signal.Signals(signum).name)
            if on_second is not None:
                on_second()
            os._exit(hard_exit_code)
        received.append(signum)
        logger.info("%s received: stopping (send it again to exit at once)",
                    signal.Signals(signum).name)
        stop()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)
