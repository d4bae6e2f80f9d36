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
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.conftest import ROOT, wait_for
from tests.queue_servers import free_port

PROGRAM = Path("/usr/sbin/pgbouncer")
MODES = ("transaction", "session")
#: Server connections per database: the test process, a consumer (two), and two worker
#: processes (a connection for each executor, writer and the heartbeat) fit in session mode.
POOL_SIZES = {"transaction": 10, "session": 40}

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
logfile = {directory}/pgbouncer.log
pidfile = {directory}/pgbouncer.pid
"""


def _installed() -> Path:
    if not PROGRAM.exists():
        subprocess.run([sys.executable, str(ROOT / "scripts" / "ensure_services.py"),
                        "pgbouncer"], check=True)
    return PROGRAM


class PgBouncer:
    """One PgBouncer in `mode` ("transaction" or "session") in front of host:port."""

    def __init__(self, mode: str, *, host: str, port: int, user: str = "postgres") -> None:
        if mode not in MODES:
            raise ValueError(f"pool mode {mode!r}: one of {MODES}")
        self.mode = mode
        self.port = free_port()
        self.directory = Path(tempfile.mkdtemp(prefix=f"atf-pgbouncer-{mode}-"))
        (self.directory / "users.txt").write_text(f'"{user}" ""\n')
        config = self.directory / "pgbouncer.ini"
        config.write_text(CONFIG.format(host=host, port=port, listen_port=self.port, mode=mode,
                                        pool_size=POOL_SIZES[mode], directory=self.directory))
        runs_as = pwd.getpwnam("postgres")
        for path in (self.directory, *self.directory.iterdir()):
            os.chown(path, runs_as.pw_uid, runs_as.pw_gid)
        argv = [str(_installed()), str(config)]
        if os.geteuid() == 0:
            argv[1:1] = ["-u", "postgres"]
        self.process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wait_for(self._listening, timeout_s=20, message=f"PgBouncer ({mode}) to listen")

    def _listening(self) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError(f"PgBouncer exited: {self.process.stderr.read().decode()}")
        log = self.directory / "pgbouncer.log"
        return log.exists() and "listening on 127.0.0.1" in log.read_text()

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)
        shutil.rmtree(self.directory, ignore_errors=True)
