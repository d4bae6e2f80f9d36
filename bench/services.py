"""The bench's own Redis server and PostgreSQL databases, one per system."""

from __future__ import annotations

import logging
import shutil
import socket
import subprocess
import time
from datetime import datetime
from types import TracebackType
from urllib.parse import urlsplit

import psutil
import psycopg
import redis
from psycopg import sql

logger = logging.getLogger(__name__)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for_port(port: int, *, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


class PrivateRedis:
    """A throw-away redis-server on a free loopback port, without persistence."""

    def __init__(self) -> None:
        self.port = free_port()
        self.popen: subprocess.Popen | None = None

    def __enter__(self) -> str:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server not found: install it or pass --redis-url")
        self.popen = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--databases", "16"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_port(self.port, timeout_s=10)
        return f"redis://127.0.0.1:{self.port}"

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 trace: TracebackType | None) -> None:
        if self.popen is not None:
            self.popen.terminate()
            self.popen.wait(timeout=10)


def ensure_database(server_dsn: str, name: str) -> str:
    """Create database `name` on the server if missing; return its DSN."""
    with psycopg.connect(f"{server_dsn}/postgres", autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not exists:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return f"{server_dsn}/{name}"


def _present(conn: psycopg.Connection, tables: tuple[str, ...]) -> list[str]:
    return [t for t in tables
            if conn.execute("SELECT to_regclass(%s)", (t,)).fetchone()[0] is not None]


def has_tables(dsn: str, tables: tuple[str, ...]) -> bool:
    """Whether every one of `tables` exists."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return len(_present(conn, tables)) == len(tables)


def empty_tables(dsn: str, tables: tuple[str, ...]) -> None:
    """Truncate those of `tables` that exist."""
    if not tables:
        return
    with psycopg.connect(dsn, autocommit=True) as conn:
        if present := _present(conn, tables):
            conn.execute(sql.SQL("TRUNCATE {} RESTART IDENTITY CASCADE").format(
                sql.SQL(", ").join(map(sql.Identifier, present))))


def flush(redis_url: str) -> None:
    """Empty one Redis database of the bench's own server."""
    redis.Redis.from_url(redis_url).flushdb()


def redis_pid(redis_url: str) -> int:
    """The pid of the Redis server behind `redis_url`."""
    return int(redis.Redis.from_url(redis_url).info("server")["process_id"])


def postmaster_pid(dsn: str) -> int:
    """The pid of the PostgreSQL server behind `dsn` (its backends are that process' children)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        backend = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        return psutil.Process(backend).ppid()


def port_of(dsn: str) -> int:
    """The port of a PostgreSQL DSN (5432 when it names none)."""
    return urlsplit(dsn).port or 5432


def live_workers(dsn: str, *, since: datetime) -> int:
    """Workers registered since `since` and not stopped, each seen again since it started
    (it has heartbeated)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM tasks_core_worker WHERE stopped_at IS NULL "
                           "AND started_at >= %s AND last_seen > started_at",
                           (since,)).fetchone()
    return int(row[0])
