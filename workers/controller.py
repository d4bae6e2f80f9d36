"""The controller thread: fills the buffer with tasks its transport claims for this worker."""

from __future__ import annotations

import logging
import threading
import time

from tasks_core.conf import atf_settings
from tasks_core.exceptions import QueueUnavailable
from workers.buffer import WorkBuffer
from workers.transport import Transport, TransportUnavailable

logger = logging.getLogger(__name__)


class ControllerThread(threading.Thread):
    def __init__(self, *, buffer: WorkBuffer, transport: Transport, index: int = 0) -> None:
        super().__init__(name=f"ControllerThread-{index}", daemon=True)
        self.buffer = buffer
        self.transport = transport
        self.running = True

    def run(self) -> None:
        while self.running:
            try:
                free = self.buffer.reserve()
                if free <= 0:
                    self.buffer.wait_for_free_slot(timeout_s=self.transport.claim_wait_s)
                    continue
                claimed: list = []
                try:
                    claimed = self.transport.claim(free)
                finally:
                    self.hand_out(claimed, reserved=free)
            except (QueueUnavailable, TransportUnavailable) as exc:
                logger.warning("cannot claim tasks: %s", exc)
                self.transport.reset()
                time.sleep(atf_settings.restart_delay_s)
            except Exception:
                logger.exception("controller loop failed", extra={"action": "controller_restart"})
                self.transport.reset()
                time.sleep(atf_settings.restart_delay_s)

    def hand_out(self, claimed: list, *, reserved: int) -> None:
        """Buffer claimed tasks, giving back the claim's `reserved` slots; ones a closing
        buffer refuses go straight back to the store."""
        if refused := self.buffer.put(claimed, reserved=reserved):
            released = self.transport.release(refused)
            logger.info("handed back %d task(s) claimed while stopping", released)

    def stop(self) -> None:
        self.running = False
