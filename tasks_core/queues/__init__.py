"""Queue backends behind one interface; `ATF_QUEUE_BACKEND` picks the class."""

from __future__ import annotations

from tasks_core import conf
from tasks_core.conf import atf_settings
from tasks_core.exceptions import ConfigurationError
from tasks_core.queues.base import Message, Popped, QueueBackend

__all__ = ["Message", "Popped", "QueueBackend", "backend"]


def backend(*, connections: int | None = None) -> QueueBackend:
    """A new client of the configured queue service (one per thread that blocks on it).

    `connections` bounds a Redis client's pool: a thread that finds every connection taken
    waits for one instead of failing (a client shared by many request threads).
    """
    name = atf_settings.queue_backend
    if name == "redis":
        from tasks_core.queues.redis import RedisQueue

        return RedisQueue(conf.redis_url(), atf_settings.queue_prefix,
                          cluster=atf_settings.redis_cluster, connections=connections)
    if name == "sqs":
        from tasks_core.queues.sqs import SqsQueue

        return SqsQueue(
            prefix=atf_settings.queue_prefix,
            endpoint_url=atf_settings.sqs_endpoint_url,
            region=atf_settings.sqs_region,
            visibility_timeout_s=atf_settings.sqs_visibility_timeout_s,
        )
    raise ConfigurationError(f"unknown ATF_QUEUE_BACKEND {name!r}: use 'redis' or 'sqs'")
