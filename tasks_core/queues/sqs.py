"""Amazon SQS queues through boto3: one standard SQS queue per <lambda, priority>.

Queues are created on demand (CreateQueue is idempotent) and their URLs cached. A popped
message stays in SQS, invisible for `visibility_timeout_s`, until `ack` deletes it after the
claim; if the worker dies first it shows up again, and the stale lease makes the controller
drop it. SQS cannot block on several queues at once, so a pop sweeps the queues in priority
order without waiting, then long-polls the first (highest) one for a short slice, and repeats
until `wait_s` runs out: a message in a lower queue waits at most one slice.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
import time
from collections.abc import Iterator, Sequence
from typing import TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from tasks_core.exceptions import QueueUnavailable
from tasks_core.queues.base import (
    Message,
    Popped,
    QueueBackend,
    decode_popped,
    sweep_then_block,
    unavailable_on,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: Most entries SQS takes in one batch call, and most messages one receive returns.
_BATCH = 10
#: Longest long poll SQS allows (WaitTimeSeconds).
_LONG_POLL_MAX_S = 20
#: Long poll of the first queue between two sweeps when a pop spans several queues.
_SLICE_S = 1
#: Pause between two sweeps when less than a whole second of the wait is left.
_PAUSE_S = 0.1
#: Longest SQS queue name.
_MAX_NAME = 80
_INVALID_CHARS = re.compile(r"[^A-Za-z0-9_-]")
#: Error codes of a queue that was deleted behind our back (its cached URL is stale).
_MISSING_CODES = {"AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"}
_PURGE_IN_PROGRESS = {"AWS.SimpleQueueService.PurgeQueueInProgress", "PurgeQueueInProgress"}
_ERRORS: tuple[type[BaseException], ...] = (BotoCoreError, ClientError)


def _chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    return (items[start : start + size] for start in range(0, len(items), size))


def sqs_queue_name(queue: str) -> str:
    """A valid SQS name for an ATF queue name: readable part, '-', and a hash of the original.

    SQS names allow only [A-Za-z0-9_-] and 80 characters; the hash keeps names that differ only
    in replaced characters (`a.b` and `a_b`) apart.
    """
    digest = hashlib.sha256(queue.encode()).hexdigest()[:10]
    readable = _INVALID_CHARS.sub("_", queue)[: _MAX_NAME - len(digest) - 1]
    return f"{readable}-{digest}"


class SqsQueue(QueueBackend):
    """Queues in Amazon SQS (or an SQS-compatible endpoint); messages are deleted by `ack`."""

    supports_ack = True
    #: One SQS queue holds every shard's tasks of a <lambda, priority>: a receive samples
    #: the queue's servers rather than taking the oldest run, so the shards' tasks already
    #: come mixed, and a queue per shard would multiply the receive calls of an idle worker.
    splits_by_shard = False

    def __init__(self, *, prefix: str, endpoint_url: str | None = None,
                 region: str | None = None, visibility_timeout_s: int = 30) -> None:
        super().__init__(prefix)
        self.visibility_timeout_s = visibility_timeout_s
        config = Config(
            connect_timeout=5,
            read_timeout=_LONG_POLL_MAX_S + 10,  # a long poll holds the request open
            retries={"mode": "standard", "max_attempts": 3},
        )
        with unavailable_on(_ERRORS, "sqs client setup"):
            self.client = boto3.session.Session().client(
                "sqs", endpoint_url=endpoint_url, region_name=region, config=config
            )
        self._urls: dict[str, str] = {}

    @contextlib.contextmanager
    def _calling(self, action: str) -> Iterator[None]:
        """Translate errors into QueueUnavailable; forget cached URLs of deleted queues."""
        with unavailable_on(_ERRORS, f"sqs {action}"):
            try:
                yield
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") in _MISSING_CODES:
                    self._urls.clear()
                raise

    def url(self, queue: str) -> str:
        """The SQS URL of an ATF queue, creating the queue on first use."""
        url = self._urls.get(queue)
        if url is None:
            with self._calling(f"create queue {queue}"):
                url = self.client.create_queue(QueueName=sqs_queue_name(queue))["QueueUrl"]
            self._urls[queue] = url
        return url

    def push(self, queue: str, messages: Sequence[Message]) -> None:
        url = self.url(queue)
        with self._calling(f"push to {queue}"):
            for chunk in _chunks(messages, _BATCH):
                entries = [{"Id": str(i), "MessageBody": m.encode()} for i, m in enumerate(chunk)]
                failed = self.client.send_message_batch(QueueUrl=url, Entries=entries).get(
                    "Failed", []
                )
                if failed:
                    raise QueueUnavailable(
                        f"sqs push to {queue} failed: {len(failed)} of {len(entries)} messages "
                        f"not sent: {failed[0].get('Message', '')}"
                    )

    def pop(self, queues: Sequence[str], *, max_count: int, wait_s: float) -> list[Popped]:
        if not queues or max_count < 1:
            return []
        count = min(max_count, _BATCH)
        longest_s = _LONG_POLL_MAX_S if len(queues) == 1 else _SLICE_S

        def take(queue: str, block_s: float) -> list[Popped]:
            # Long polls take whole seconds and must not pass the deadline.
            if block_s == 0 or int(block_s) >= 1:
                return self._receive(queue, count=count, wait_s=int(block_s))
            time.sleep(min(block_s, _PAUSE_S))
            return []

        return sweep_then_block(queues, take=take, wait_s=wait_s,
                                block_s=lambda remaining: min(remaining, longest_s))

    def _receive(self, queue: str, *, count: int, wait_s: int) -> list[Popped]:
        url = self.url(queue)
        with self._calling(f"receive from {queue}"):
            received = self.client.receive_message(
                QueueUrl=url, MaxNumberOfMessages=count, WaitTimeSeconds=wait_s,
                VisibilityTimeout=self.visibility_timeout_s,
            ).get("Messages", [])
        popped = [decode_popped(queue, m["Body"], receipt=m["ReceiptHandle"]) for m in received]
        # A body that is not ours can never be claimed, so nothing would ever ack it: delete it
        # now, or it would come back after every visibility timeout.
        poison = [m["ReceiptHandle"] for m, p in zip(received, popped, strict=True)
                  if p.message is None]
        if poison:
            logger.warning("deleting %d unreadable messages from %s", len(poison), queue,
                           extra={"action": "queue_poison_deleted", "queue": queue})
            self._delete(queue, poison)
        return popped

    def ack(self, queue: str, messages: Sequence[Message]) -> None:
        self._delete(queue, [m.receipt for m in messages if m.receipt is not None])

    def _delete(self, queue: str, receipts: Sequence[str]) -> None:
        if not receipts:
            return
        url = self.url(queue)
        with self._calling(f"delete from {queue}"):
            for chunk in _chunks(receipts, _BATCH):
                entries = [{"Id": str(i), "ReceiptHandle": r} for i, r in enumerate(chunk)]
                failed = self.client.delete_message_batch(QueueUrl=url, Entries=entries).get(
                    "Failed", []
                )
                if failed:
                    # An expired receipt: the message comes back, and its stale lease drops it.
                    logger.warning("%d messages of %s were not deleted: %s", len(failed), queue,
                                   failed[0].get("Message", ""))

    def depth(self, queue: str) -> int:
        url = self.url(queue)
        with self._calling(f"depth of {queue}"):
            attributes = self.client.get_queue_attributes(
                QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"]
            )["Attributes"]
        return int(attributes["ApproximateNumberOfMessages"])

    def purge(self, queue: str) -> None:
        url = self.url(queue)
        with self._calling(f"purge {queue}"):
            try:
                self.client.purge_queue(QueueUrl=url)
                return
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") not in _PURGE_IN_PROGRESS:
                    raise
        # SQS allows one PurgeQueue a minute per queue: delete what is visible instead.
        while popped := self._receive(queue, count=_BATCH, wait_s=0):
            self.ack(queue, [p.message for p in popped if p.message is not None])

    def ping(self) -> None:
        with self._calling("ping"):
            self.client.list_queues(MaxResults=1)

    def close(self) -> None:
        self.client.close()
