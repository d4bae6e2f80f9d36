"""A real PgBouncer (Debian's `pgbouncer`) in front of the test database, on a private port.

`scripts/ensure_services.py pgbouncer` installs the program (`make test` runs it); each
PgBouncer runs as the `postgres` user (PgBouncer refuses root) from a directory of its own, in
the pool mode it is given, and passes every database name through to the local PostgreSQL,
with at most POOL_SIZES[mode] server connections per database: few in transaction mode (they
are shared), one per client in session mode, where a client holds its server connection for
its whole session and one more client than the pool has waits for ever.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.chaos.services import wait_until
from tests.ports import free_port

ROOT = Path(__file__).resolve().parent.parent

PROGRAM = Path("/usr/sbin/pgbouncer")
MODES = ("transaction", "session")
#: Server connections per database: the test process, a consumer (two), and two worker
#: processes (a connection for each executor, writer and the heartbeat) fit in session mode.
POOL_SIZES = {"transaction": 10, "session": 40}
#: Seconds PgBouncer waits after a failed server login before it tries again. Its default, 15,
#: turns a failover's fraction of a second into 15 s: connections it tried during the
#: promotion failed, and every client waits out the retry (measured in the chaos run).
LOGIN_RETRY_S = 1

CONFIG = """\
[databases]
* = host={host} port={port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {listen_port}
unix_socket_dir =
auth_type = trust
auth_file = {directory}/users.txt
pool_mode = {mode}
max_client_conn = 1000
default_pool_size = {pool_size}
reserve_pool_size = 0
ignore_startup_parameters = extra_float_digits,options
server_login_retry = {login_retry_s}
logfile = {directory}/pgbouncer.log
pidfile = {directory}/pgbouncer.pid
"""


def _installed() -> Path:
    if not PROGRAM.exists():
        subprocess.run([sys.executable, str(ROOT / "scripts" / "ensure_services.py"),
                        "pgbouncer"], check=True)
    return PROGRAM


class PgBouncer:
    """One PgBouncer in `mode` ("transaction" or "session") in front of host:port, with
    `pool_size` server connections per database (POOL_SIZES[mode] by default)."""

    def __init__(self, mode: str, *, host: str, port: int, user: str = "postgres",
                 pool_size: int | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"pool mode {mode!r}: one of {MODES}")
        self.mode = mode
        self.port = free_port()
        self.pool_size = pool_size or POOL_SIZES[mode]
        self.directory = Path(tempfile.mkdtemp(prefix=f"atf-pgbouncer-{mode}-"))
        (self.directory / "users.txt").write_text(f'"{user}" ""\n')
        self.config = self.directory / "pgbouncer.ini"
        self._write_config(host, port)
        self._start()

    def _write_config(self, host: str, port: int) -> None:
        self.config.write_text(CONFIG.format(
            host=host, port=port, listen_port=self.port, mode=self.mode,
            pool_size=self.pool_size, login_retry_s=LOGIN_RETRY_S, directory=self.directory))
        runs_as = pwd.getpwnam("postgres")
        for path in (self.directory, *self.directory.iterdir()):
            os.chown(path, runs_as.pw_uid, runs_as.pw_gid)

    def _start(self) -> None:
        argv = [str(_installed()), str(self.config)]
        if os.geteuid() == 0:
            argv[1:1] = ["-u", "postgres"]
        self._log_offset = self._log().stat().st_size if self._log().exists() else 0
        # Its stderr (every log line again) goes to a file: a pipe nobody reads fills after
        # about 64 KB of logging and then blocks PgBouncer for good (seen in a chaos run).
        with open(self.directory / "stderr.txt", "ab") as stderr:
            self.process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=stderr)
        wait_until(self._listening, timeout_s=20, what=f"PgBouncer ({self.mode}) to listen")

    def _log(self) -> Path:
        return self.directory / "pgbouncer.log"

    def _listening(self) -> bool:
        if self.process.poll() is not None:
            stderr = (self.directory / "stderr.txt").read_text(errors="replace")
            raise RuntimeError(f"PgBouncer exited: {stderr[-2000:]}")
        if not self._log().exists():
            return False
        with open(self._log(), "rb") as log:
            log.seek(self._log_offset)
            return b"listening on 127.0.0.1" in log.read()

    def point_at(self, host: str, port: int) -> None:
        """Send new server connections to host:port (a reload, as after a failover: clients
        stay connected to the pooler; server connections to the old address are dropped)."""
        self._write_config(host, port)
        os.kill(self.process.pid, signal.SIGHUP)

    def restart(self) -> None:
        """SIGKILL the pooler and start it again on the same port: every client connection
        drops, as when a pooler's host or pod dies and comes back."""
        self.process.kill()
        self.process.wait(10)
        (self.directory / "pgbouncer.pid").unlink(missing_ok=True)
        self._start()

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)
        shutil.rmtree(self.directory, ignore_errors=True)
