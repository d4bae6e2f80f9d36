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
    def __init__(self, *, buffer: WorkBuffer, transport: Transport) -> None:
        super().__init__(name="ControllerThread", daemon=True)
        self.buffer = buffer
        self.transport = transport
        self.running = True

    def run(self) -> None:
        while self.running:
            try:
                free = self.buffer.free_slots()
                if free <= 0:
                    self.buffer.wait_for_free_slot(timeout_s=self.transport.claim_wait_s)
                    continue
                claimed = self.transport.claim(free)
                if claimed:
                    self.hand_out(claimed)
            except (QueueUnavailable, TransportUnavailable) as exc:
                logger.warning("cannot claim tasks: %s", exc)
                self.transport.reset()
                time.sleep(atf_settings.restart_delay_s)
            except Exception:
                logger.exception("controller loop failed", extra={"action": "controller_restart"})
                self.transport.reset()
                time.sleep(atf_settings.restart_delay_s)

    def hand_out(self, claimed: list) -> None:
        """Buffer claimed tasks; ones a closing buffer refuses go straight back to the store."""
        if refused := self.buffer.put(claimed):
            released = self.transport.release(refused)
            logger.info("handed back %d task(s) claimed while stopping", released)

    def stop(self) -> None:
        self.running = False
