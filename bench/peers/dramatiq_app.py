"""Dramatiq with its Redis broker and default middleware (acks after the task, retries on)."""

from __future__ import annotations

import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from bench.peers import common

broker = RedisBroker(url=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/15"))
dramatiq.set_broker(broker)


@dramatiq.actor(actor_name="record", queue_name="b")
def record(key: str, due: float) -> None:
    common.record(key, due)


@dramatiq.actor(actor_name="noop", queue_name="a")
def noop() -> None:
    common.noop()
