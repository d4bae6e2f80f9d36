"""When a consumer last finished a pass: a mark in Redis, for `/metrics` and its alert.

A consumer that stopped passing (crashed, stuck on a lock, cut off from the store) leaves every
due task where it is, and nothing else would say so: workers stay live and queues stay empty.
Each consumer sets one key to the time of its latest pass, at most once a second; `/metrics`
shows its age as `atf_consumer_pass_age_seconds` (absent before any consumer passed).
The mark is a hint for people: losing it (a flushed Redis) costs an alert, never a task.
"""

from __future__ import annotations

import logging
from datetime import datetime

import redis

from tasks_core import wakeup
from tasks_core.conf import atf_settings

logger = logging.getLogger(__name__)


def key() -> str:
    return f"{atf_settings.queue_prefix}:consumer:last_pass"


def passed(now: datetime) -> None:
    """Record that a consumer finished a pass at `now`."""
    try:
        wakeup.client().set(key(), f"{now.timestamp():.3f}")
    except redis.RedisError as exc:
        logger.debug("consumer pass not marked: %s", exc)


def last_pass_s() -> float | None:
    """Unix time of the latest pass of any consumer; None if none is known."""
    try:
        value = wakeup.client().get(key())
    except redis.RedisError as exc:
        logger.warning("consumer pass mark unavailable: %s", exc)
        return None
    return None if value is None else float(value)
