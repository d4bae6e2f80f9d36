"""The demo lambdas of docs/contract.md, used by the quick start, benchmarks and black-box tests."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
import time
from typing import Any, TypeGuard

import redis
import redis.asyncio as aioredis
from django.conf import settings

from demo import CRASH_EXIT_STATUS
from tasks_core import atf
from tasks_core.conf import redis_url

#: demo.record appends only to Redis keys that start with this.
RECORD_PREFIX = "demo:"

_local = threading.local()


def _redis() -> redis.Redis:
    if getattr(_local, "client", None) is None:
        _local.client = redis.Redis.from_url(redis_url())
    return _local.client


def _seconds(payload: Any, field: str = "seconds") -> float:
    seconds = payload.get(field, 0) if isinstance(payload, dict) else 0
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
        raise atf.Fatal(f"{field} must be a number, zero or more; got {seconds!r}")
    return float(seconds)


def _record_seconds(ctx: atf.TaskContext, payload: Any) -> float:
    """demo.record's sleep: `seconds`, or `retry_seconds` (when given) after the first attempt,
    so that a test's long first attempt, cut short by a fault, is not waited out again."""
    if ctx.attempt > 1 and isinstance(payload, dict) and "retry_seconds" in payload:
        return _seconds(payload, "retry_seconds")
    return _seconds(payload)


def _sleep(ctx: atf.TaskContext, seconds: float) -> None:
    """Sleep, heartbeating every second so long sleeps keep their lease."""
    deadline = time.monotonic() + seconds
    while (remaining := deadline - time.monotonic()) > 0:
        time.sleep(min(remaining, 1.0))
        if remaining > 1.0:
            ctx.heartbeat()


@atf.register("demo.noop", team=settings.ATF_DEMO_TEAM)
def noop(ctx: atf.TaskContext, payload: Any) -> dict:
    """Do nothing."""
    return {}


@atf.register("demo.sleep", team=settings.ATF_DEMO_TEAM)
def sleep(ctx: atf.TaskContext, payload: Any) -> dict:
    """Sleep `payload["seconds"]`, heartbeating."""
    seconds = _seconds(payload)
    _sleep(ctx, seconds)
    return {"slept": seconds}


@atf.register("demo.fail", team=settings.ATF_DEMO_TEAM, max_attempts=5, backoff_base=0.2,
              backoff_cap=2.0)
def fail(ctx: atf.TaskContext, payload: Any) -> dict:
    """Fail on purpose: `mode` fatal, retriable (the first `times` attempts) or crash (likewise)."""
    payload = payload if isinstance(payload, dict) else {}
    mode = payload.get("mode", "fatal")
    times = payload.get("times", 1)
    if mode == "fatal":
        raise atf.Fatal("demo.fail asked to fail for good")
    if mode not in ("retriable", "crash"):
        raise atf.Fatal(f"unknown mode {mode!r}: use fatal, retriable or crash")
    if ctx.attempt <= times:
        if mode == "crash":
            os._exit(CRASH_EXIT_STATUS)  # the worker process dies mid-task, as a SIGKILL would
        raise RuntimeError(f"demo.fail: failing attempt {ctx.attempt} of the first {times}")
    return {"attempt": ctx.attempt}


def _record_key(value: Any) -> TypeGuard[str]:
    return isinstance(value, str) and value.startswith(RECORD_PREFIX) and len(value) <= 200


@atf.register("demo.record", team=settings.ATF_DEMO_TEAM)
def record(ctx: atf.TaskContext, payload: Any) -> dict:
    """Sleep `seconds` (`retry_seconds`, if given, after the first attempt), then append
    {task_id, attempt, start, end, pid, host} to list `key`; with `started_key`, first append
    {task_id, attempt, start} to that list (a test's sign that the lambda runs). Both must start
    with RECORD_PREFIX (a payload must not name any other Redis key)."""
    key, started_key = _record_keys(payload)
    start = time.time()
    if started_key is not None:
        _redis().rpush(started_key, _started_line(ctx, start))
    _sleep(ctx, _record_seconds(ctx, payload))
    _redis().rpush(key, _record_line(ctx, start))
    return {"recorded": key}


def _record_keys(payload: Any) -> tuple[str, str | None]:
    """demo.record's `key` and `started_key` (None if not given); Fatal if they are not ours."""
    key = payload.get("key") if isinstance(payload, dict) else None
    started_key = payload.get("started_key") if isinstance(payload, dict) else None
    if not _record_key(key):
        raise atf.Fatal(f"payload needs a string 'key' that starts with {RECORD_PREFIX!r}")
    if started_key is not None and not _record_key(started_key):
        raise atf.Fatal(f"payload's 'started_key' must be a string that starts with "
                        f"{RECORD_PREFIX!r}")
    return key, started_key


def _started_line(ctx: atf.TaskContext, start: float) -> str:
    return json.dumps({"task_id": ctx.task_id, "attempt": ctx.attempt, "start": start})


def _record_line(ctx: atf.TaskContext, start: float) -> str:
    return json.dumps({"task_id": ctx.task_id, "attempt": ctx.attempt, "start": start,
                       "end": time.time(), "pid": os.getpid(), "host": socket.gethostname(),
                       "thread": threading.get_ident()})


@atf.register("demo.steps", team=settings.ATF_DEMO_TEAM)
def steps(ctx: atf.TaskContext, payload: Any) -> dict:
    """Run `steps` steps (ctx.step), each appending {task_id, step, attempt} to list `key`
    when it actually runs; on the first attempt, after step `pause_after`, sleep `seconds`
    (heartbeating: a test's moment to kill the worker). Returns every step's result."""
    key = payload.get("key") if isinstance(payload, dict) else None
    if not _record_key(key):
        raise atf.Fatal(f"payload needs a string 'key' that starts with {RECORD_PREFIX!r}")

    def run_step(number: int) -> int:
        _redis().rpush(key, json.dumps({"task_id": ctx.task_id, "step": number,
                                        "attempt": ctx.attempt}))
        return number * 10

    results = []
    for number in range(1, int(payload.get("steps", 4)) + 1):
        results.append(ctx.step(f"step-{number}", run_step, number))
        if ctx.attempt == 1 and number == payload.get("pause_after"):
            _sleep(ctx, _seconds(payload))
    return {"steps": results}


@atf.register("demo.hang", team=settings.ATF_DEMO_TEAM)
def hang(ctx: atf.TaskContext, payload: Any) -> dict:
    """Sleep `payload["seconds"]` in one call, never heartbeating: a lambda that hangs.

    An interrupt reaches it only when the sleep returns, so a time limit shorter than the
    sleep (`schedule(..., timeout=...)`) makes its worker process exit after the grace.
    """
    seconds = _seconds(payload)
    time.sleep(seconds)
    return {"slept": seconds}


# --- Async lambdas: their coroutines run on the worker's event loop, many at once -------------


@atf.register("demo.async_sleep", team=settings.ATF_DEMO_TEAM)
async def async_sleep(ctx: atf.TaskContext, payload: Any) -> dict:
    """`await asyncio.sleep(payload["seconds"])` (the worker heartbeats it)."""
    seconds = _seconds(payload)
    await asyncio.sleep(seconds)
    return {"slept": seconds}


@atf.register("demo.async_record", team=settings.ATF_DEMO_TEAM)
async def async_record(ctx: atf.TaskContext, payload: Any) -> dict:
    """demo.record as an async lambda: the same payload and lines, its sleep an
    `await asyncio.sleep`."""
    key, started_key = _record_keys(payload)
    start = time.time()
    client = aioredis.Redis.from_url(redis_url())
    try:
        if started_key is not None:
            await client.rpush(started_key, _started_line(ctx, start))
        await asyncio.sleep(_record_seconds(ctx, payload))
        await client.rpush(key, _record_line(ctx, start))
    finally:
        await client.aclose()
    return {"recorded": key}


@atf.register("demo.async_fail", team=settings.ATF_DEMO_TEAM, max_attempts=5,
              backoff_base=0.2, backoff_cap=2.0)
async def async_fail(ctx: atf.TaskContext, payload: Any) -> dict:
    """demo.fail as an async lambda (the same payload and outcomes)."""
    await asyncio.sleep(0)
    return fail(ctx, payload)
