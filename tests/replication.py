"""A PostgreSQL 15 primary and a streaming standby of its own, on private ports, for failovers.

`scripts/ensure_services.py standby` makes sure Debian's server binaries are there (`make test`
runs it); each pair lives in a temporary directory, runs as the `postgres` user (initdb refuses
root), listens on 127.0.0.1 only, and is stopped and removed by the fixture that made it. The
shared server on 5432 is never touched.

- `synchronous=True`: the primary's commits wait until the standby has the WAL
  (synchronous_standby_names = '*', synchronous_commit = on), so a commit a client saw
  acknowledged survives a failover. The new primary runs without a synchronous standby until
  `rebuild_standby()` gives it one (as Patroni's non-strict synchronous mode does), or its
  every commit would wait for a standby that does not exist.
- `synchronous=False`: commits return at once; a failover loses whatever the standby had not
  received yet.

`failover()` fences the primary (`pg_ctl stop -m immediate`: it takes no write after this) and
promotes the standby (`pg_ctl promote`). Clients name both nodes in one multi-host URL with
`target_session_attrs=read-write` (`url()`), and find whichever is the primary by themselves.
`rebuild_standby()` makes a new standby of the new primary (pg_basebackup) on the fenced
node's port, so the URL stays valid and the next failover can happen.

Durability on disk is off (fsync = off): a fenced primary is stopped, not a crashed machine,
and its files are thrown away; what a failover loses is decided by replication alone.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg

from tests.chaos.services import wait_until
from tests.ports import free_port

ROOT = Path(__file__).resolve().parent.parent
VERSION = "15"
BIN = Path("/usr/lib/postgresql") / VERSION / "bin"
#: Settings of both nodes (the standby's copy comes with pg_basebackup).
CONFIG = """
listen_addresses = '127.0.0.1'
unix_socket_directories = '{sockets}'
max_connections = 200
shared_buffers = 32MB
fsync = off
wal_level = replica
max_wal_senders = 4
wal_keep_size = 128MB
hot_standby = on
wal_receiver_status_interval = 1s
log_min_messages = warning
log_line_prefix = '%m [%p] '
"""


def _runs_as() -> dict[str, object]:
    """subprocess arguments that run a server binary as `postgres` when we are root."""
    return {"user": "postgres", "group": "postgres"} if os.geteuid() == 0 else {}


def installed() -> Path:
    if not (BIN / "pg_basebackup").exists():
        subprocess.run([sys.executable, str(ROOT / "scripts" / "ensure_services.py"), "standby"],
                       check=True)
    return BIN


def _run(*argv: str, timeout_s: float = 120.0) -> None:
    done = subprocess.run([str(installed() / argv[0]), *argv[1:]], capture_output=True,
                          text=True, timeout=timeout_s, check=False, **_runs_as())
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): "
                           f"{(done.stderr or done.stdout).strip()}")


def private_home(prefix: str) -> tuple[Path, Path]:
    """A new temporary directory for servers' data, and its directory for their sockets, both
    the `postgres` user's when we are root."""
    home = Path(tempfile.mkdtemp(prefix=prefix))
    sockets = home / "sockets"
    sockets.mkdir()
    if os.geteuid() == 0:
        postgres = pwd.getpwnam("postgres")
        for path in (home, sockets):
            os.chown(path, postgres.pw_uid, postgres.pw_gid)
    return home, sockets


@dataclass
class Node:
    """One server: its data directory, its port, and whether it runs."""

    directory: Path
    port: int
    sockets: Path

    @property
    def log(self) -> Path:
        return self.directory.parent / f"{self.directory.name}.log"

    def start(self) -> None:
        _run("pg_ctl", "-D", str(self.directory), "-l", str(self.log), "-w", "-t", "60",
             "-o", f"-p {self.port}", "start")

    def restart(self) -> None:
        """Restart the server (`-m fast`: every connection drops, the data stays)."""
        _run("pg_ctl", "-D", str(self.directory), "-l", str(self.log), "-w", "-t", "60",
             "-m", "fast", "-o", f"-p {self.port}", "restart")

    def fence(self) -> None:
        """Stop at once (`-m immediate`): every connection drops, nothing more is written."""
        _run("pg_ctl", "-D", str(self.directory), "-m", "immediate", "stop")

    def promote(self) -> None:
        """End recovery; returns once the node takes writes."""
        _run("pg_ctl", "-D", str(self.directory), "-w", "-t", "60", "promote")

    def connect(self, dbname: str = "postgres") -> psycopg.Connection:
        return psycopg.connect(host="127.0.0.1", port=self.port, user="postgres",
                               dbname=dbname, autocommit=True, connect_timeout=5)

    def query(self, sql: str, dbname: str = "postgres") -> list[tuple]:
        with self.connect(dbname) as conn:
            cursor = conn.execute(sql)
            return cursor.fetchall() if cursor.description else []

    def remove(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


@dataclass(frozen=True)
class Failover:
    """How long each step of one failover took (seconds)."""

    fence_s: float
    promote_s: float

    @property
    def total_s(self) -> float:
        return self.fence_s + self.promote_s


class ReplicatedPostgres:
    """A primary and a streaming standby (see the module's docstring)."""

    def __init__(self, *, synchronous: bool) -> None:
        self.synchronous = synchronous
        self.home, sockets = private_home("atf-replica-")
        self.primary = Node(self.home / "node-a", free_port(), sockets)
        self.standby = Node(self.home / "node-b", free_port(), sockets)
        try:
            _run("initdb", "-D", str(self.primary.directory), "-U", "postgres",
                 "--auth=trust", "-E", "UTF8", "--no-sync", "--no-instructions")
            with open(self.primary.directory / "postgresql.conf", "a") as conf:
                conf.write(CONFIG.format(sockets=sockets))
            self.primary.start()
            self.standby = self._new_standby(self.standby.directory, self.standby.port)
        except BaseException:
            self.stop()  # nothing of a half-made pair is left running
            raise

    def url(self, dbname: str) -> str:
        """A multi-host URL of both nodes that connects to whichever takes writes."""
        hosts = ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)
        return f"postgres://postgres@{hosts}/{dbname}?target_session_attrs=read-write"

    @property
    def nodes(self) -> list[Node]:
        """Both nodes in a fixed order (the URL's), whichever is the primary now."""
        return sorted([self.primary, self.standby], key=lambda node: node.directory.name)

    def _new_standby(self, directory: Path, port: int) -> Node:
        """A standby of the current primary, streaming (and synchronous, if the pair is)."""
        _run("pg_basebackup", "-h", "127.0.0.1", "-p", str(self.primary.port), "-U", "postgres",
             "-D", str(directory), "-R", "-X", "stream", "-c", "fast", "--no-sync")
        # A standby that becomes the primary must not wait for a standby of its own: the
        # copied synchronous setting is dropped; `_make_synchronous` sets it on the primary.
        auto = directory / "postgresql.auto.conf"
        auto.write_text("".join(line for line in auto.read_text().splitlines(keepends=True)
                                if not line.startswith("synchronous_standby_names")))
        standby = Node(directory, port, self.primary.sockets)
        standby.start()
        wait_until(lambda: self.primary.query(
            "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'")[0][0] == 1,
            timeout_s=60, what="the standby to stream")
        if self.synchronous:
            self._make_synchronous()
        return standby

    def _make_synchronous(self) -> None:
        self.primary.query("ALTER SYSTEM SET synchronous_standby_names = '*'")
        self.primary.query("SELECT pg_reload_conf()")
        wait_until(lambda: self.primary.query(
            "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'")[0][0] == 1,
            timeout_s=60, what="the standby to be synchronous")

    def copy_database(self, name: str, *, host: str, port: int, dbname: str) -> None:
        """Database `name` on the primary, a copy of `dbname` at host:port (pg_dump | psql):
        a migrated database in a second, where `migrate` takes ten."""
        self.primary.query(f'CREATE DATABASE "{name}"')
        dump = subprocess.Popen([str(installed() / "pg_dump"), "--no-owner", "-h", host,
                                 "-p", str(port), "-U", "postgres", "-d", dbname],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        load = subprocess.run([str(installed() / "psql"), "-q", "-v", "ON_ERROR_STOP=1", "-h",
                               "127.0.0.1", "-p", str(self.primary.port), "-U", "postgres",
                               "-d", name], stdin=dump.stdout, capture_output=True, text=True,
                              timeout=120, check=False)
        dump.stdout.close()  # type: ignore[union-attr]
        dumped = dump.wait(timeout=60)
        if dumped != 0 or load.returncode != 0:
            raise RuntimeError(f"copying {dbname} failed: {dump.stderr.read().decode()}"  # type: ignore[union-attr]
                               f"{load.stderr.strip()}")

    def detach_standby(self) -> None:
        """Stop the standby's replication (as a partition between the two would): an
        asynchronous primary goes on committing what the standby never gets; a synchronous
        one makes its commits wait."""
        self.standby.query("ALTER SYSTEM SET primary_conninfo = ''")
        self.standby.query("SELECT pg_reload_conf()")
        wait_until(lambda: self.primary.query(
            "SELECT count(*) FROM pg_stat_replication")[0][0] == 0,
            timeout_s=60, what="the standby to stop streaming")

    def failover(self) -> Failover:
        """Fence the primary, promote the standby; the old primary's node stays down."""
        started = time.monotonic()
        self.primary.fence()
        fenced = time.monotonic()
        self.standby.promote()
        self.primary, self.standby = self.standby, self.primary
        return Failover(fence_s=fenced - started, promote_s=time.monotonic() - fenced)

    def rebuild_standby(self) -> None:
        """A new standby of the new primary where the fenced node was (same port)."""
        fenced = self.standby
        fenced.remove()
        self.standby = self._new_standby(fenced.directory, fenced.port)

    def stop(self, *, remove: bool = True) -> None:
        """Stop both servers at once; remove their data unless `remove` is False."""
        for node in (self.primary, self.standby):
            if (node.directory / "postmaster.pid").exists():
                subprocess.run([str(BIN / "pg_ctl"), "-D", str(node.directory), "-m",
                                "immediate", "stop"], capture_output=True, check=False,
                               timeout=60, **_runs_as())
        if remove:
            shutil.rmtree(self.home, ignore_errors=True)
