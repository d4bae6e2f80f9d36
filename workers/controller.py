"""The controller thread: fills the buffer with tasks its transport claims for this worker.

A claim carries the finished attempts waiting in the result writer: they are recorded in the
claim's commit (one commit, and for a remote worker one request, for an executor's result and
its next task), and the claim then answers at once rather than wait for work. What no claim
carries, the result writer writes (workers/batching.py).
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future

from tasks_core import store
from tasks_core.conf import atf_settings
from tasks_core.exceptions import QueueUnavailable
from workers import db
from workers.batching import BatchWriterThread
from workers.buffer import WorkBuffer
from workers.outages import OutageLog
from workers.transport import FinishedAttempt, Transport, TransportUnavailable, Written

logger = logging.getLogger(__name__)

Carried = list[tuple[list[FinishedAttempt], Future[list[Written]]]]


def claims_outage() -> OutageLog:
    """What a worker says while its claims fail: one for all its controllers."""
    return OutageLog(logger, "claim tasks")


class ControllerThread(threading.Thread):
    def __init__(self, *, buffer: WorkBuffer, transport: Transport,
                 results: BatchWriterThread[FinishedAttempt, Written] | None = None,
                 index: int = 0, outage: OutageLog | None = None) -> None:
        super().__init__(name=f"ControllerThread-{index}", daemon=True)
        self.buffer = buffer
        self.transport = transport
        #: What the worker says while claims fail (shared by its controllers).
        self.outage = outage or claims_outage()
        self.results = results  #: the result writer whose waiting results claims carry
        self.running = True

    def run(self) -> None:
        try:
            while self.running:
                try:
                    self.claim_once()
                except (QueueUnavailable, TransportUnavailable) as exc:
                    self.outage.failed(exc)
                    self.pause()
                except Exception:
                    logger.exception("controller loop failed",
                                     extra={"action": "controller_restart"})
                    self.pause()
        finally:
            self._carry_no_more()
            db.reset_connection()  # a thread that ends lets go of its connection

    def pause(self) -> None:
        """After a failure: a fresh connection, a moment's rest, and meanwhile the result
        writer writes what arrives."""
        self._carry_no_more()
        self.transport.reset()
        time.sleep(atf_settings.restart_delay_s)

    def _carry_no_more(self) -> None:
        if self.results is not None:
            self.results.drop_carrier(self)

    def claim_once(self) -> None:
        """Claim for the free executors, carrying the results waiting to be written; or wait
        for an executor to be free."""
        free = self.buffer.reserve()
        if free <= 0:
            if self.results is not None:
                self.results.await_slot(self)  # a claim only once an executor is free
            self.buffer.wait_for_free_slot(timeout_s=self.transport.claim_wait_s)
            return
        carried: Carried = (self.results.carry(self) if self.results is not None
                            and self.transport.carries_results else [])
        claimed: list[store.ClaimedTask] = []
        statuses: list[Written] = []
        try:
            if carried:
                statuses, claimed = self.transport.finish_and_claim(
                    BatchWriterThread.items(carried), free)
            else:
                claimed = self.transport.claim(free)
            self.outage.succeeded()
        except BaseException:
            if self.results is not None and carried:
                self.results.give_back(self, carried)  # the writer retries them
            self.hand_out([], reserved=free)
            raise
        try:
            self.hand_out(claimed, reserved=free)
        finally:
            BatchWriterThread.settle(carried, statuses)  # committed, whatever the hand-out does

    def hand_out(self, claimed: list, *, reserved: int) -> None:
        """Buffer claimed tasks, giving back the claim's `reserved` slots; ones a closing
        buffer refuses go straight back to the store."""
        if refused := self.buffer.put(claimed, reserved=reserved):
            released = self.transport.release(refused)
            logger.info("handed back %d task(s) claimed while stopping", released)

    def stop(self) -> None:
        self.running = False
