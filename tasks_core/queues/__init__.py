"""Queue backends behind one interface; `ATF_QUEUE_BACKEND` picks the class."""

from __future__ import annotations

from django.conf import settings

from tasks_core.exceptions import ConfigurationError
from tasks_core.queues.base import Message, Popped, QueueBackend

__all__ = ["Message", "Popped", "QueueBackend", "backend"]


def backend(*, connections: int | None = None) -> QueueBackend:
    """A new client of the configured queue service (one per thread that blocks on it).

    `connections` bounds a Redis client's pool: a thread that finds every connection taken
    waits for one instead of failing (a client shared by many request threads).
    """
    name = settings.ATF_QUEUE_BACKEND
    if name == "redis":
        from tasks_core.queues.redis import RedisQueue

        return RedisQueue(settings.ATF_REDIS_URL, settings.ATF_QUEUE_PREFIX,
                          cluster=settings.ATF_REDIS_CLUSTER, connections=connections)
    if name == "sqs":
        from tasks_core.queues.sqs import SqsQueue

        return SqsQueue(
            prefix=settings.ATF_QUEUE_PREFIX,
            endpoint_url=settings.ATF_SQS_ENDPOINT_URL,
            region=settings.ATF_SQS_REGION,
            visibility_timeout_s=settings.ATF_SQS_VISIBILITY_TIMEOUT_S,
        )
    raise ConfigurationError(f"unknown ATF_QUEUE_BACKEND {name!r}: use 'redis' or 'sqs'")
