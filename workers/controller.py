"""The controller thread: pulls its lambdas' queues into the buffer, claiming through the store."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence

from django.conf import settings
from django.utils import timezone

from tasks_core import queues, store
from tasks_core.exceptions import QueueUnavailable
from workers import db
from workers.buffer import WorkBuffer

logger = logging.getLogger(__name__)

#: Longest block on the queues, so a stop request is noticed quickly.
POP_WAIT_S = 1.0


class ControllerThread(threading.Thread):
    def __init__(self, *, buffer: WorkBuffer, queue: queues.QueueBackend, worker_id: str,
                 lambda_ids: Mapping[str, int], priorities: Sequence[str]) -> None:
        super().__init__(name="ControllerThread", daemon=True)
        self.buffer = buffer
        self.queue = queue
        self.worker_id = worker_id
        self.lambda_ids = dict(lambda_ids)
        # Strict priority within a lambda: BLMPOP takes from the first non-empty list.
        self.queues_by_lambda = [[queue.queue_name(name, priority) for priority in priorities]
                                 for name in sorted(self.lambda_ids)]
        self._turn = 0
        self.running = True

    def queue_names(self) -> list[str]:
        """This pop's queue order: lambdas take turns coming first, so none starves another."""
        self._turn = (self._turn + 1) % len(self.queues_by_lambda)
        order = self.queues_by_lambda[self._turn:] + self.queues_by_lambda[:self._turn]
        return [name for names in order for name in names]

    def run(self) -> None:
        while self.running:
            try:
                free = self.buffer.free_slots()
                if free <= 0:
                    self.buffer.wait_for_free_slot(timeout_s=POP_WAIT_S)
                    continue
                popped = self.queue.pop(self.queue_names(), max_count=free, wait_s=POP_WAIT_S)
                if popped:
                    self.dispatch(popped)
            except QueueUnavailable as exc:
                logger.warning("queues unavailable: %s", exc)
                time.sleep(settings.ATF_RESTART_DELAY_S)
            except Exception:
                logger.exception("controller loop failed", extra={"action": "controller_restart"})
                db.reset_connection()
                time.sleep(settings.ATF_RESTART_DELAY_S)

    def dispatch(self, popped: Sequence[queues.Popped]) -> None:
        """Claim the popped messages whose lease is current; hand them to the executors."""
        messages = [item.message for item in popped if item.message is not None]
        for item in popped:
            if item.message is None:
                logger.warning("discarded a message that is not ATF's on %s: %.200r",
                               item.queue, item.raw, extra={"action": "message_corrupt"})
        claimed = store.claim(messages, worker=self.worker_id,
                              lambda_ids=self.lambda_ids.values(), now=timezone.now())
        if self.queue.supports_ack:
            for queue_name in {item.queue for item in popped}:
                self.queue.ack(queue_name, [i.message for i in popped
                                            if i.queue == queue_name and i.message is not None])
        if len(claimed) < len(messages):
            logger.debug("discarded %d stale message(s)", len(messages) - len(claimed),
                         extra={"action": "message_stale"})
        self.buffer.put(claimed)

    def stop(self) -> None:
        self.running = False
