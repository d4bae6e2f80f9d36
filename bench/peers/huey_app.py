"""Huey on Redis with results off (no result store)."""

from __future__ import annotations

import os

from huey import RedisHuey

from bench.peers import common

huey = RedisHuey("bench", results=False,
                 url=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/15"))


@huey.task()
def record(key: str, due: float) -> None:
    common.record(key, due)


@huey.task()
def noop() -> None:
    common.noop()
