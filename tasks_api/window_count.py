"""Counters of fixed windows in Django's default cache, shared by every server process: the
request throttle's and the scheduling rate's.

Where the cache is Redis (django-redis' default client, or Django's own RedisCache), a count is
one `INCRBY` on the cache's own connection, under the key the cache would name, and the
window's first count adds its `EXPIRE`: no script per request (django-redis' `incr` sends a Lua
`EVAL`, that Redis compiles a hash of and runs, every time; Django's sends `EXISTS` first), so
one round trip, two for a window's first. A counter whose first count's `EXPIRE` was lost (the
process died between the two) outlives its window: the next window counts under another key,
so the limits still hold, and the leftover key is a few bytes. The values are integers as both
caches store them, so `cache.get` reads them.

Any other cache counts through its own `incr`/`add`, as before. An unreachable cache lets the
request through (None), as django-redis' IGNORE_EXCEPTIONS would.
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.cache import cache
from redis.exceptions import RedisError

logger = logging.getLogger(__name__)


def _redis_client(key: str) -> Any | None:
    """The raw Redis client that the default cache keeps `key` on, or None for a cache that
    is not Redis (or whose client shards or wraps the keys otherwise)."""
    try:
        from django_redis.client import DefaultClient  # type: ignore[import-untyped]
    except ImportError:  # django-redis is optional for a host project
        DefaultClient = None  # noqa: N806
    backend: Any = cache
    if DefaultClient is not None and type(getattr(backend, "client", None)) is DefaultClient:
        return backend.client.get_client(write=True)
    from django.core.cache.backends.redis import RedisCache

    if isinstance(backend, RedisCache):
        return backend._cache.get_client(key, write=True)
    return None


def count_in_window(key: str, amount: int, *, timeout_s: int) -> int | None:
    """Add `amount` to the counter `key` (made, expiring after `timeout_s`, by the first
    count); its new value, or None when the cache cannot count (unreachable, or the key
    vanished): callers then let the request through."""
    full_key = cache.make_key(key)
    client = _redis_client(full_key)
    if client is None:
        return _count_by_cache(key, amount, timeout_s=timeout_s)
    try:
        count = int(client.incrby(full_key, amount))
        if count == amount:  # the window's first count made the key
            client.expire(full_key, timeout_s)
    except RedisError:  # unreachable, or a value that is not an integer
        logger.warning("the cache cannot count %s: let through", key, exc_info=True)
        return None
    return count


def _count_by_cache(key: str, amount: int, *, timeout_s: int) -> int | None:
    """The count through the cache's own `incr`: two round trips, three for a key's first."""
    try:
        return cache.incr(key, amount)
    except ValueError:  # the key's first count
        cache.add(key, 0, timeout=timeout_s)
        try:
            return cache.incr(key, amount)
        except ValueError:
            return None
