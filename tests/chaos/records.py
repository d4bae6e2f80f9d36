"""Collects the executions `demo.record` leaves in Redis before a FLUSHALL or restart eats them."""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass

import redis

from tests.chaos.load import RECORDS_KEY
from tests.chaos.services import PrivateRedis

logger = logging.getLogger(__name__)

#: Seconds between two drains of the records list.
DRAIN_INTERVAL_S = 0.2


@dataclass(frozen=True, kw_only=True)
class Execution:
    """One run of a demo.record task, as the lambda recorded it (Unix seconds)."""

    task_id: int
    attempt: int
    start: float
    end: float
    pid: int


class RecordSink(threading.Thread):
    """Moves records out of the private Redis into memory, every DRAIN_INTERVAL_S."""

    def __init__(self, server: PrivateRedis) -> None:
        super().__init__(name="RecordSink", daemon=True)
        self.server = server
        self.executions: list[Execution] = []
        self.unreadable = 0
        self._lock = threading.Lock()
        self._stopped = threading.Event()

    def run(self) -> None:
        while not self._stopped.wait(DRAIN_INTERVAL_S):
            self.drain()

    def drain(self) -> int:
        """Take every record now in Redis; how many were taken (0 while Redis is away)."""
        with self._lock:
            try:
                with self.server.client() as client:
                    pipe = client.pipeline(transaction=True)
                    pipe.lrange(RECORDS_KEY, 0, -1)
                    pipe.delete(RECORDS_KEY)
                    lines, _deleted = pipe.execute()
            except redis.RedisError as exc:
                logger.debug("records not drained: %s", exc)
                return 0
            for line in lines:
                try:
                    data = json.loads(line)
                    self.executions.append(Execution(
                        task_id=int(data["task_id"]), attempt=int(data["attempt"]),
                        start=float(data["start"]), end=float(data["end"]), pid=int(data["pid"]),
                    ))
                except (ValueError, KeyError, TypeError):
                    self.unreadable += 1
            return len(lines)

    def stop(self) -> None:
        self._stopped.set()
        self.join(5)
        self.drain()
