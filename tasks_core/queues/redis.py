"""Redis queues: one list per <lambda, priority>, keys hash-tagged by lambda for Redis Cluster.

Producers LPUSH; consumers pop from the right with BLMPOP over the priority lists in order,
which gives strict priority and batches in one round trip. A push leaves out a message that
still waits in its list (push.lua), so a task re-enqueued after its enqueue timeout, while its
first message waits in a backlog, adds no second copy: a list holds at most its backlog.
On a single server one BLMPOP covers every queue of the pop. On Redis Cluster
(`cluster=True`) a multi-key command must stay in one hash slot, which the `{lambda}` tag
guarantees for one lambda's queues only, so a pop over several lambdas takes one LMPOP per
lambda in order and blocks in short slices.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import cached_property
from itertools import groupby
from pathlib import Path
from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException

from tasks_core import redaction
from tasks_core.queues.base import (
    Message,
    Popped,
    QueueBackend,
    decode_popped,
    sweep_then_block,
    unavailable_on,
)

logger = logging.getLogger(__name__)

#: Longest block of one BLMPOP when a pop on a cluster spans several lambdas (hash slots);
#: a message for a lambda other than the first waits at most this long.
_SLICE_S = 0.05
#: Shortest BLMPOP timeout: Redis truncates the timeout to whole milliseconds, and a
#: timeout of 0 would block forever.
_MIN_BLOCK_S = 0.01
#: Seconds a thread waits for a connection of a bounded pool before the pop or push fails.
_POOL_WAIT_S = 5.0
#: Errors of redis-py that mean "the queue service did not do it" (cluster ones included).
_ERRORS: tuple[type[BaseException], ...] = (redis.RedisError, RedisClusterException)

_Client = redis.Redis | RedisCluster
#: The script that pushes the messages a list does not hold yet (see push.lua).
_PUSH_LUA = (Path(__file__).parent / "push.lua").read_text()


def queued_key(queue: str) -> str:
    """The sorted set beside a queue's list: each message body it holds -> its push number.

    Same hash tag as the list (one slot on a cluster), so that one script reads and writes both,
    and a FLUSHDB (or a lost shard) empties both.
    """
    return f"{queue}:queued"


def _hash_tag(queue: str) -> str:
    return queue[queue.index("{") + 1 : queue.index("}")] if "{" in queue else queue


class RedisQueue(QueueBackend):
    """Queues in Redis lists; `cluster=True` talks to a Redis Cluster through any of its nodes."""

    def __init__(self, url: str, prefix: str, *, cluster: bool = False,
                 client: _Client | None = None, connections: int | None = None) -> None:
        super().__init__(prefix)
        self.url = url
        self.cluster = cluster
        self.connections = connections
        self._client = client

    @property
    def client(self) -> _Client:
        """The redis-py client, made on first use (a cluster client connects when it is made)."""
        if self._client is None:
            options: dict[str, Any] = {"socket_connect_timeout": 5, "socket_timeout": None}
            if self.connections:
                options["max_connections"] = self.connections
            with unavailable_on(_ERRORS, f"redis connect to {redaction.url(self.url)}"):
                if self.cluster:
                    self._client = RedisCluster.from_url(self.url, **options)
                elif self.connections:
                    pool = redis.BlockingConnectionPool.from_url(
                        self.url, health_check_interval=30, timeout=_POOL_WAIT_S, **options)
                    self._client = redis.Redis(connection_pool=pool)
                else:
                    self._client = redis.Redis.from_url(
                        self.url, health_check_interval=30, **options
                    )
        return self._client

    supports_dedupe = True

    @cached_property
    def _push_script(self) -> Any:
        return self.client.register_script(_PUSH_LUA)

    def push(self, queue: str, messages: Sequence[Message]) -> None:
        if not messages:
            return
        with unavailable_on(_ERRORS, f"redis push to {queue}"):
            pushed = self._push_script(keys=[queue, queued_key(queue)],
                                       args=[message.encode() for message in messages])
        if pushed < len(messages):
            logger.debug("%s: %d of %d messages still waiting there, not pushed again", queue,
                         len(messages) - pushed, len(messages))

    def pop(self, queues: Sequence[str], *, max_count: int, wait_s: float) -> list[Popped]:
        if not queues or max_count < 1:
            return []
        with unavailable_on(_ERRORS, "redis pop"):
            if not self.cluster:
                return self._pop_group(list(queues), max_count=max_count, wait_s=wait_s)
            groups = [list(keys) for _tag, keys in groupby(queues, key=_hash_tag)]
            if len(groups) == 1:
                return self._pop_group(groups[0], max_count=max_count, wait_s=wait_s)
            return self._pop_groups(groups, max_count=max_count, wait_s=wait_s)

    def _pop_group(self, keys: list[str], *, max_count: int, wait_s: float) -> list[Popped]:
        """Pop from keys that one command may name together (one server, or one hash slot)."""
        if wait_s <= 0:
            found = self.client.lmpop(len(keys), *keys, direction="RIGHT", count=max_count)
        else:
            found = self.client.blmpop(max(wait_s, _MIN_BLOCK_S), len(keys), *keys,
                                       direction="RIGHT", count=max_count)
        return self._popped(found) if found else []

    def _pop_groups(self, groups: list[list[str]], *, max_count: int,
                    wait_s: float) -> list[Popped]:
        """Pop from several hash slots in order: sweep each, then block on the first a while."""
        return sweep_then_block(
            groups, wait_s=wait_s, block_s=lambda remaining: min(remaining, _SLICE_S),
            take=lambda keys, block_s: self._pop_group(keys, max_count=max_count,
                                                       wait_s=block_s),
        )

    @staticmethod
    def _popped(found: list) -> list[Popped]:
        key, bodies = found
        queue = key.decode() if isinstance(key, bytes) else key
        return [decode_popped(queue, body) for body in bodies]

    def depth(self, queue: str) -> int:
        with unavailable_on(_ERRORS, f"redis llen {queue}"):
            return int(self.client.llen(queue))

    def depths(self, queues: Sequence[str]) -> list[int]:
        if not queues:
            return []
        with unavailable_on(_ERRORS, "redis llen of the queues"):
            pipe = self.client.pipeline(transaction=False)
            for queue in queues:
                pipe.llen(queue)
            return [int(length) for length in pipe.execute()]

    def purge(self, queue: str) -> None:
        with unavailable_on(_ERRORS, f"redis delete {queue}"):
            self.client.delete(queue, queued_key(queue))

    def ping(self) -> None:
        with unavailable_on(_ERRORS, f"redis ping {redaction.url(self.url)}"):
            self.client.ping()

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
