"""1,000 tasks that each wait one second, drained by ONE worker process: an async lambda
(`demo.async_sleep`, `await asyncio.sleep(1)`, on the worker's event loop) against a sync one
(`demo.sleep`, `time.sleep(1)`, on its executor threads).

    REDIS_URL=redis://127.0.0.1:6379/15 .venv/bin/python -m bench.async_sleep \\
        [--tasks 1000] [--async-slots 1000] [--threads 8] [--database bench_async_sleep]

It creates (and migrates) the database if missing, schedules the tasks, starts a consumer and
one `runworker` process, and prints per lambda: the drain (the first task's start to the last
one's end, from the store's task rows), the wall time from the worker's start to the last success,
and tasks per second. The sync lambda's drain is about tasks / threads seconds; the async one's
a few seconds. Figures go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import django
import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parent.parent
SERVER = "postgres://postgres@127.0.0.1:5432"


def _ensure_database(name: str) -> None:
    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def _start(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(ROOT / "manage.py"), *args], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def _stop(*children: subprocess.Popen) -> None:
    for child in children:
        os.killpg(child.pid, signal.SIGTERM)
    for child in children:
        try:
            child.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()


def drain(lambda_name: str, tasks: int, worker_args: list[str]) -> dict[str, float]:
    """Schedule `tasks` one-second tasks of `lambda_name`, drain them with one worker process;
    the figures."""
    from django.db.models import Max, Min

    from tasks_core import atf
    from tasks_core.models import TaskEntity

    TaskEntity.objects.all().delete()
    for start in range(0, tasks, 1000):  # ATF_MAX_BATCH_SIZE
        atf.schedule_many([{"lambda": lambda_name, "payload": {"seconds": 1}}
                           for _ in range(min(1000, tasks - start))])
    consumer = _start("runconsumer")
    started_s = time.monotonic()
    worker = _start("runworker", lambda_name, *worker_args)
    try:
        while TaskEntity.objects.filter(status="success").count() < tasks:
            time.sleep(0.2)
        wall_s = time.monotonic() - started_s
    finally:
        _stop(worker, consumer)
    span = TaskEntity.objects.aggregate(first=Min("started_at"), last=Max("finished_at"))
    drain_s = (span["last"] - span["first"]).total_seconds()
    return {"drain_s": drain_s, "wall_s": wall_s, "tasks_per_s": tasks / drain_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--async-slots", type=int, default=1000,
                        help="the async worker's slots (ATF_WORKER_ASYNC_SLOTS is 100)")
    parser.add_argument("--threads", type=int, default=8, help="the sync worker's threads")
    parser.add_argument("--database", default="bench_async_sleep")
    parser.add_argument("--skip-sync", action="store_true", help="only the async lambda")
    options = parser.parse_args()
    _ensure_database(options.database)
    os.environ.update({"DJANGO_SETTINGS_MODULE": "atf_project.settings", "ATF_DEMO": "1",
                       "DATABASE_URL": f"{SERVER}/{options.database}",
                       "ATF_QUEUE_PREFIX": os.environ.get("ATF_QUEUE_PREFIX", "bench_async"),
                       "ATF_POLL_INTERVAL_S": "0.2", "ATF_LOG_LEVEL": "WARNING"})
    os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/15")
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    cases = [("demo.async_sleep", ["--threads", "1", "--async-slots", str(options.async_slots)],
              f"async, 1 thread, {options.async_slots} slots")]
    if not options.skip_sync:
        cases.append(("demo.sleep", ["--threads", str(options.threads)],
                      f"sync, {options.threads} threads"))
    print(f"{options.tasks} tasks of one second each, one worker process")
    for lambda_name, worker_args, label in cases:
        figures = drain(lambda_name, options.tasks, worker_args)
        print(f"{lambda_name:18} ({label}): drain {figures['drain_s']:.1f} s, wall from the "
              f"worker's start {figures['wall_s']:.1f} s, {figures['tasks_per_s']:.0f} tasks/s",
              flush=True)


if __name__ == "__main__":
    main()
