"""The throttle's and the scheduling rate's window counters: in the shared Redis cache, one
command a count and no script, expiring with their window; other caches count as before."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from django.core.cache import cache
from django.test import override_settings

from tasks_api.window_count import count_in_window

LOCAL_CACHE = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
DJANGO_REDIS_CACHE = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache"}}


@pytest.fixture
def no_scripts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Redis scripts fail the test: a count must not send one."""
    def refused(*_args: Any, **_kwargs: Any) -> None:
        raise AssertionError("a window count sent a Redis script")

    for name in ("eval", "evalsha", "eval_ro", "evalsha_ro"):
        monkeypatch.setattr(redis.Redis, name, refused)


def test_counts_in_the_shared_redis_without_a_script(redis_client: redis.Redis,
                                                     no_scripts: None) -> None:
    # When a window is counted three times
    counts = [count_in_window("h:window:1", amount, timeout_s=30) for amount in (1, 2, 1)]
    # Then each count is the running total, kept in Redis where every process counts it
    assert counts == [1, 3, 4]
    full_key = cache.make_key("h:window:1")
    assert int(redis_client.get(full_key) or 0) == 4
    # and it expires with its window, and reads back through the cache
    assert 0 < redis_client.ttl(full_key) <= 30
    assert cache.get("h:window:1") == 4


def test_another_process_counts_the_same_window(redis_client: redis.Redis) -> None:
    # Given another server process counted 5 in the window (straight into Redis)
    redis_client.set(cache.make_key("h:window:2"), 5, ex=30)
    # When this process counts one more
    # Then its count follows the other's: a token's limit holds across processes
    assert count_in_window("h:window:2", 1, timeout_s=30) == 6


@pytest.mark.parametrize("caches", [LOCAL_CACHE, DJANGO_REDIS_CACHE], ids=["locmem", "django"])
def test_other_caches_count_too(caches: dict[str, Any], redis_client: redis.Redis,
                                settings: Any) -> None:
    # (a LocMemCache takes its LOCATION as a name)
    with override_settings(CACHES={"default": {**caches["default"],
                                               "LOCATION": settings.REDIS_URL}}):
        assert [count_in_window("h:window:3", 2, timeout_s=30) for _ in range(3)] == [2, 4, 6]
        assert cache.get("h:window:3") == 6


@override_settings(CACHES={"default": {
    "BACKEND": "django_redis.cache.RedisCache", "LOCATION": "redis://127.0.0.1:1/0",
    "OPTIONS": {"IGNORE_EXCEPTIONS": True, "SOCKET_CONNECT_TIMEOUT": 1}}})
def test_an_unreachable_cache_lets_the_request_through() -> None:
    assert count_in_window("h:window:4", 1, timeout_s=30) is None
