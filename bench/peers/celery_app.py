"""Celery on Redis, configured for reliability as its docs recommend: acks_late, prefetch 1."""

from __future__ import annotations

import os

from celery import Celery

from bench.peers import common

app = Celery("bench_celery", broker=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/15"))
app.conf.update(
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    task_ignore_result=True,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


@app.task(name="bench.record")
def record(key: str, due: float) -> None:
    common.record(key, due)


@app.task(name="bench.noop")
def noop() -> None:
    common.noop()
