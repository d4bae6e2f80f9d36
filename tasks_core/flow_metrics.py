"""Starts that flow limits refused, counted fleet-wide (one Redis hash), for /metrics and the API.

A count is added once its claim commits; Redis being away costs only the count (a line in the
debug log), never the claim.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import redis
from django.db import transaction

from tasks_core import wakeup
from tasks_core.conf import atf_settings

logger = logging.getLogger(__name__)


def _key() -> str:
    return f"{atf_settings.queue_prefix}:flow:refused"


def refused_on_commit(counts: Mapping[tuple[int, str], int]) -> None:
    """Add `counts` ((lambda id, limit) -> refused starts) once the caller's transaction commits."""
    transaction.on_commit(lambda: _add(dict(counts)))


def _add(counts: Mapping[tuple[int, str], int]) -> None:
    try:
        pipe = wakeup.client().pipeline(transaction=False)
        for (lambda_id, limit), count in counts.items():
            pipe.hincrby(_key(), f"{lambda_id}:{limit}", count)
        pipe.execute()
    except redis.RedisError as exc:
        logger.debug("refused starts not counted: %s", exc)


def refused() -> dict[tuple[int, str], int]:
    """Starts refused so far, by (lambda id, limit); empty when Redis cannot be read."""
    try:
        raw = wakeup.client().hgetall(_key())
    except redis.RedisError as exc:
        logger.debug("refused starts not read: %s", exc)
        return {}
    counts = {}
    for field, value in raw.items():
        text = field.decode() if isinstance(field, bytes) else field
        lambda_id, _, limit = text.partition(":")
        counts[int(lambda_id), limit] = int(value)
    return counts
