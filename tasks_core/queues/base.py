"""The queue interface: one queue per <lambda, priority>, messages naming a task and its lease."""

from __future__ import annotations

import abc
import contextlib
import json
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

from tasks_core.exceptions import QueueUnavailable

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class Message:
    """A queued pointer to a task. Only its current lease may claim it."""

    task_id: int
    lease: int
    #: Backend's handle for deleting the message after a claim (SQS); not part of the body.
    receipt: str | None = None

    def encode(self) -> str:
        return json.dumps({"id": self.task_id, "lease": self.lease}, separators=(",", ":"))

    @classmethod
    def decode(cls, body: str | bytes, *, receipt: str | None = None) -> Message:
        """Parse a message body; ValueError if it is not one of ours."""
        data = json.loads(body)
        if not isinstance(data, dict) or not isinstance(data.get("id"), int) or not isinstance(
            data.get("lease"), int
        ):
            raise ValueError(f"not an ATF message: {body!r:.200}")  # noqa: TRY004 - the contract
        return cls(task_id=data["id"], lease=data["lease"], receipt=receipt)


@dataclass(frozen=True, kw_only=True)
class Popped:
    """A message and the queue it came from; `message` is None for a body that did not parse."""

    queue: str
    message: Message | None
    raw: str = ""


@contextlib.contextmanager
def unavailable_on(errors: tuple[type[BaseException], ...], action: str) -> Iterator[None]:
    """Translate a client library's `errors` into QueueUnavailable naming the failed `action`."""
    try:
        yield
    except errors as exc:
        raise QueueUnavailable(f"{action} failed: {exc}") from exc


def decode_popped(queue: str, body: str | bytes, *, receipt: str | None = None) -> Popped:
    """A popped body as a Popped; one that is not an ATF message comes back with message=None."""
    text = body.decode(errors="replace") if isinstance(body, bytes) else body
    try:
        return Popped(queue=queue, message=Message.decode(text, receipt=receipt), raw=text)
    except ValueError:
        return Popped(queue=queue, message=None, raw=text)


def sweep_then_block(sources: Sequence[T], *, take: Callable[[T, float], list[Popped]],
                     wait_s: float, block_s: Callable[[float], float]) -> list[Popped]:
    """Take from the first of `sources` that has something, in their order (strict priority).

    While all are empty, block on the first for `block_s(remaining)` seconds at a time, until
    `wait_s` has passed; `take(source, 0)` must not block.
    """
    deadline = time.monotonic() + wait_s
    while True:
        for source in sources:
            if popped := take(source, 0):
                return popped
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return []
        if popped := take(sources[0], block_s(remaining)):
            return popped


class QueueBackend(abc.ABC):
    """One queue per <lambda, priority>. Subclasses: redis.RedisQueue, sqs.SqsQueue.

    Every method raises QueueUnavailable when the service cannot be reached.
    """

    #: Whether a popped message must be acknowledged (deleted) after it was claimed.
    supports_ack: bool = False
    #: Whether `push` leaves out a message still waiting in its queue, so that a queue holds
    #: at most one copy of each (task, lease): its length is at most its backlog.
    supports_dedupe: bool = False
    #: Whether each shard's tasks wait in queues of their own. A list is popped from one end,
    #: so consumers that push each shard's due tasks in runs into one list would have the
    #: workers drain one shard's run after another: the shards would take turns rather than
    #: work side by side. With a queue per shard, a pop takes the shards in rotation.
    splits_by_shard: bool = True

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def queue_name(self, lambda_name: str, priority: str, slot: int = 0) -> str:
        """The queue of one <lambda, priority> that holds the tasks of the shard in `slot`.

        Slot 0's is the pair's queue of a store with one shard; a backend that
        `splits_by_shard` gives each other shard a queue of its own beside it, and one that
        does not keeps every shard's tasks in the pair's one queue.
        """
        queue = f"{self.prefix}:{{{lambda_name}}}:{priority}"
        return f"{queue}:shard{slot}" if slot and self.splits_by_shard else queue

    def shard_queues(self, lambda_name: str, priority: str, shards: int) -> list[str]:
        """The queues of one <lambda, priority> in a store of `shards` shards, by slot (one, for
        a backend that does not split by shard)."""
        slots = range(shards if self.splits_by_shard else 1)
        return [self.queue_name(lambda_name, priority, slot) for slot in slots]

    @abc.abstractmethod
    def push(self, queue: str, messages: Sequence[Message]) -> None:
        """Append messages to a queue (where `supports_dedupe`, those it does not hold yet)."""

    @abc.abstractmethod
    def pop(self, queues: Sequence[str], *, max_count: int, wait_s: float) -> list[Popped]:
        """Take up to `max_count` messages, from the first non-empty queue in `queues` order.

        Blocks up to `wait_s` seconds while all are empty; returns [] on time-out.
        """

    @abc.abstractmethod
    def depth(self, queue: str) -> int:
        """How many messages wait in a queue (approximate for SQS)."""

    def depths(self, queues: Sequence[str]) -> list[int]:
        """How many messages wait in each of `queues`, in their order (a backend that can asks
        for all of them in one round trip)."""
        return [self.depth(queue) for queue in queues]

    @abc.abstractmethod
    def purge(self, queue: str) -> None:
        """Delete every message of a queue."""

    def ack(self, queue: str, messages: Sequence[Message]) -> None:  # noqa: B027
        """Forget messages that were claimed (only backends that `supports_ack`)."""

    @abc.abstractmethod
    def ping(self) -> None:
        """Raise QueueUnavailable unless the service answers."""

    def close(self) -> None:  # noqa: B027
        """Release connections."""
