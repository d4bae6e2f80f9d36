"""Redis queues: one list per <lambda, priority>, keys hash-tagged by lambda for Redis Cluster.

Producers LPUSH; consumers pop from the right with BLMPOP over a lambda's priority lists in
order, which gives strict priority and batches in one round trip.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from itertools import groupby

import redis

from tasks_core.exceptions import QueueUnavailable
from tasks_core.queues.base import Message, Popped, QueueBackend

logger = logging.getLogger(__name__)

#: Longest block of one BLMPOP when a pop spans several lambdas (different hash slots).
_SLICE_S = 0.05


def _hash_tag(queue: str) -> str:
    return queue[queue.index("{") + 1 : queue.index("}")] if "{" in queue else queue


class RedisQueue(QueueBackend):
    def __init__(self, url: str, prefix: str, *, client: redis.Redis | None = None) -> None:
        super().__init__(prefix)
        self.client = client or redis.Redis.from_url(
            url, socket_connect_timeout=5, socket_timeout=None, health_check_interval=30
        )

    def push(self, queue: str, messages: Sequence[Message]) -> None:
        if not messages:
            return
        try:
            self.client.lpush(queue, *(message.encode() for message in messages))
        except redis.RedisError as exc:
            raise QueueUnavailable(f"redis push to {queue} failed: {exc}") from exc

    def pop(self, queues: Sequence[str], *, max_count: int, wait_s: float) -> list[Popped]:
        # BLMPOP needs its keys in one hash slot on a cluster: pop a lambda's queues together,
        # and take turns between lambdas when one worker serves several.
        groups = [list(keys) for _tag, keys in groupby(queues, key=_hash_tag)]
        deadline = time.monotonic() + wait_s
        try:
            while True:
                for keys in groups:
                    found = self.client.lmpop(len(keys), *keys, direction="RIGHT",
                                              count=max_count)
                    if found:
                        return self._popped(found)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return []
                block_s = remaining if len(groups) == 1 else min(remaining, _SLICE_S)
                if len(groups) == 1:
                    found = self.client.blmpop(block_s, len(groups[0]), *groups[0],
                                               direction="RIGHT", count=max_count)
                    return self._popped(found) if found else []
                time.sleep(block_s)
        except redis.RedisError as exc:
            raise QueueUnavailable(f"redis pop failed: {exc}") from exc

    @staticmethod
    def _popped(found: list) -> list[Popped]:
        key, bodies = found
        queue = key.decode() if isinstance(key, bytes) else key
        popped = []
        for body in bodies:
            text = body.decode(errors="replace") if isinstance(body, bytes) else body
            try:
                popped.append(Popped(queue=queue, message=Message.decode(text), raw=text))
            except ValueError:
                popped.append(Popped(queue=queue, message=None, raw=text))
        return popped

    def depth(self, queue: str) -> int:
        try:
            return int(self.client.llen(queue))
        except redis.RedisError as exc:
            raise QueueUnavailable(f"redis llen {queue} failed: {exc}") from exc

    def purge(self, queue: str) -> None:
        try:
            self.client.delete(queue)
        except redis.RedisError as exc:
            raise QueueUnavailable(f"redis delete {queue} failed: {exc}") from exc

    def ping(self) -> None:
        try:
            self.client.ping()
        except redis.RedisError as exc:
            raise QueueUnavailable(f"redis is unreachable: {exc}") from exc

    def close(self) -> None:
        self.client.close()
