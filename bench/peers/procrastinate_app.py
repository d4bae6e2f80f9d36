"""procrastinate on PostgreSQL with its defaults (LISTEN/NOTIFY, 5 s polling for scheduled jobs)."""

from __future__ import annotations

import os

import procrastinate

from bench.peers import common

app = procrastinate.App(
    connector=procrastinate.PsycopgConnector(
        conninfo=os.environ.get("BENCH_PG_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
    )
)


@app.task(name="record", queue="b")
def record(key: str, due: float) -> None:
    common.record(key, due)


@app.task(name="noop", queue="a")
def noop() -> None:
    common.noop()
