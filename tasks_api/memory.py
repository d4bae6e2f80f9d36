"""A short memory of values for the API's request threads: each expires after
ATF_API_AUTH_CACHE_S seconds (0: nothing is remembered), per server process."""

from __future__ import annotations

import threading
import time
from typing import Generic, TypeVar

from tasks_core.conf import atf_settings

K = TypeVar("K")
V = TypeVar("V")

#: The clock of every memory (tests move it on).
_now = time.monotonic


class ShortMemory(Generic[K, V]):
    """At most `max_entries` values (past that it starts afresh: a bound, not an LRU)."""

    def __init__(self, *, max_entries: int = 10_000) -> None:
        self.max_entries = max_entries
        self._lock = threading.Lock()
        self._values: dict[K, tuple[float, V]] = {}

    def get(self, key: K) -> V | None:
        entry = self._values.get(key)
        if entry is None or entry[0] <= _now():
            return None
        return entry[1]

    def put(self, key: K, value: V) -> None:
        ttl_s = atf_settings.api_auth_cache_s
        if ttl_s <= 0:
            return
        with self._lock:
            if len(self._values) >= self.max_entries:
                self._values.clear()
            self._values[key] = (_now() + ttl_s, value)

    def forget_all(self) -> None:
        with self._lock:
            self._values.clear()
