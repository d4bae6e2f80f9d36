"""The runner's own services: a private redis-server and a PostgreSQL database of its own.

Both belong to the run alone, so FLUSHALL, a Redis restart and terminating every backend of the
database hit nobody else. The shared PostgreSQL server itself is never restarted unless the
operator passes a command for it (`--pg-restart-command`).
"""

from __future__ import annotations

import logging
import shlex
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
import redis

if TYPE_CHECKING:
    from tests.chaos.failover import Promotion  # which imports this module
    from tests.pooler import PgBouncer

logger = logging.getLogger(__name__)


def say(line: str) -> None:
    """The runner's output: one flushed line on stdout."""
    print(line, flush=True)  # noqa: T201 - the runner is a command-line program


def wait_until(condition: Callable[[], object], *, timeout_s: float, what: str) -> object:
    """Poll `condition` every 0.1 s until it is truthy; RuntimeError after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.1)


class PrivateRedis:
    """A redis-server on its own port, without persistence; stop() and start() keep the port."""

    def __init__(self, port: int, log_dir: Path) -> None:
        self.port = port
        self.log_path = log_dir / "redis.log"
        self.process: subprocess.Popen | None = None
        self.url = f"redis://127.0.0.1:{port}/0"

    def client(self, timeout_s: float = 2.0) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=timeout_s,
                           socket_connect_timeout=timeout_s)

    def _answers(self) -> bool:
        try:
            with self.client(0.5) as client:
                return bool(client.ping())
        except redis.RedisError:
            return False

    def start(self) -> None:
        with open(self.log_path, "a") as log:
            self.process = subprocess.Popen(
                ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--maxclients", "2000"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        wait_until(self._answers, timeout_s=10, what=f"redis-server on port {self.port}")

    def stop(self) -> None:
        """Stop the server at once (SIGKILL): whatever it held is gone, as after a crash."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None

    def flushall(self) -> None:
        with self.client() as client:
            client.flushall()

    def used_memory(self) -> int:
        try:
            with self.client(1.0) as client:
                return int(client.info("memory")["used_memory"])
        except redis.RedisError:
            return 0


class ChaosDatabase:
    """A database of the shared PostgreSQL server that belongs to the run: made fresh each run."""

    def __init__(self, name: str, *, host: str = "127.0.0.1", port: int = 5432,
                 user: str = "postgres") -> None:
        if "chaos" not in name:
            # The run drops and recreates it: refuse any name that could be someone's database.
            raise ValueError(f"database name {name!r} must contain 'chaos'")
        self.name = name
        self.host, self.port, self.user = host, port, user
        self.url = f"postgres://{user}@{host}:{port}/{name}"
        #: Failovers of the database (only a primary with a standby has any).
        self.promotions: list[Promotion] = []
        #: The PgBouncer every process of the run connects through (None: they connect
        #: to the server); the runner's own admin connections go to the server.
        self.pooler: PgBouncer | None = None

    def pool(self, pooler: PgBouncer) -> None:
        """From now on the run's URL (and the nodes the db-cut proxies stand in front of) is
        `pooler`'s, which is in front of this database's server."""
        self.pooler = pooler
        self.url = f"postgres://{self.user}@127.0.0.1:{pooler.port}/{self.name}"

    def _admin(self, attempts: int = 20) -> psycopg.Connection:
        """A connection to the server's `postgres` database, retried a while: a shared server
        may be out of connection slots for a moment ("too many clients")."""
        for attempt in range(1, attempts + 1):
            try:
                return psycopg.connect(host=self.host, port=self.port, user=self.user,
                                       dbname="postgres", autocommit=True, connect_timeout=5)
            except psycopg.OperationalError:
                if attempt == attempts:
                    raise
                time.sleep(0.25)
        raise AssertionError("unreachable")

    @property
    def nodes(self) -> list[tuple[str, int]]:
        """Host and port of each server the URL names (one here: the server, or the pooler)."""
        if self.pooler is not None:
            return [("127.0.0.1", self.pooler.port)]
        return [(self.host, self.port)]

    def keep(self) -> str:
        """Leave the database for inspection; where it is."""
        return f"{self.host}:{self.port}"

    def recreate(self) -> None:
        with self._admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{self.name}"')

    def drop(self) -> None:
        with self._admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')

    def terminate_backends(self) -> int:
        """Terminate every connection to the database but this one; how many were ended."""
        with self._admin() as conn:
            rows = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()", (self.name,)
            ).fetchall()
        return sum(1 for (ended,) in rows if ended)

    #: Whether the server belongs to the run, which may then restart it without being asked.
    owns_server = False

    def restart_server(self, command: str | None) -> str:
        """Restart the whole PostgreSQL server with the operator's command (never by default);
        how it was done."""
        if command is None:
            raise ValueError("a shared server is restarted only with --pg-restart-command")
        subprocess.run(shlex.split(command), check=True, timeout=120)
        wait_until(self._accepts, timeout_s=60, what="PostgreSQL to accept connections again")
        return repr(command)

    def _accepts(self) -> bool:
        try:
            with self._admin(attempts=1) as conn:
                conn.execute("SELECT 1")
            return True
        except psycopg.Error:
            return False
