"""The task body every peer runs: append "due start end" (Unix seconds) to a Redis list."""

from __future__ import annotations

import os
import time

import redis

_clients: dict[int, redis.Redis] = {}


def _client() -> redis.Redis:
    # One client per process: prefork and process pools fork after import.
    pid = os.getpid()
    if pid not in _clients:
        _clients[pid] = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"])
    return _clients[pid]


def record(key: str, due: float) -> None:
    """Append this task's start time (and the time it was due) to the list `key`."""
    start = time.time()
    _client().rpush(key, f"{due!r} {start!r} {time.time()!r}")


def noop() -> None:
    """Do nothing (lambda A of the isolation run)."""


def parse(lines: list[bytes]) -> list[tuple[float, float, float]]:
    """(due, start, end) of each line written by record()."""
    rows = []
    for line in lines:
        due, start, end = line.split()
        rows.append((float(due), float(start), float(end)))
    return rows
