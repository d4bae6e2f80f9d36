"""A throw-away PostgreSQL cluster of the bench's own, for counters no one else moves.

The WAL counters (`pg_stat_wal`) and the server's CPU belong to a whole cluster, so the
store-cost measurement runs each system on a cluster of its own: `initdb` into a temporary
directory (as the `postgres` user when the bench runs as root, since PostgreSQL refuses to run
as root), `pg_stat_statements` preloaded, started on a free loopback port, removed at the end.
Everything else is the server's defaults (synchronous commits, fsync on, full-page writes),
except autovacuum, which is off so that a measurement window holds only the system's own work.
A cluster may run inside a CPU quota (`bench.cpu_quota`): its postmaster starts in the quota's
group, so every backend it forks is held to the same CPUs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from bench.procs import run_once
from bench.services import ensure_database, free_port, wait_for_port

if TYPE_CHECKING:
    from bench.cpu_quota import CpuQuota
    from bench.drivers.base import Env
    from bench.measure import Target

#: Settings of the private cluster beside initdb's defaults.
SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "shared_preload_libraries": "'pg_stat_statements'",
    "pg_stat_statements.track": "'all'",
    "autovacuum": "off",
    "max_connections": "200",
    # The WAL of a whole measurement stays readable (pg_walinspect) across its checkpoints.
    "wal_keep_size": "'4GB'",
}


def binaries() -> Path:
    """The newest installed server's bin directory (Debian: /usr/lib/postgresql/N/bin)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda path: int(Path(path).parent.parent.name))
    if not found:
        located = shutil.which("initdb")
        if located is None:
            raise RuntimeError("initdb not found: install the PostgreSQL server package")
        return Path(located).parent
    return Path(found[-1]).parent


def _as_postgres(argv: list[str]) -> list[str]:
    """The command run as the `postgres` user when we are root (the server refuses root)."""
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *argv]
    return argv


def _pg_ctl(data: Path, *args: str) -> list[str]:
    return _as_postgres([str(binaries() / "pg_ctl"), "-D", str(data), *args])


def stop(data: Path, *, mode: str = "fast") -> None:
    """Stop the cluster in `data` (`mode` "immediate": as if its machine died; no error where
    it is not running)."""
    subprocess.run(_pg_ctl(data, "-m", mode, "-w", "stop"), capture_output=True, check=False)


@contextlib.contextmanager
def private_cluster(quota: CpuQuota | None = None) -> Iterator[tuple[str, Path]]:
    """Yield (server DSN without a database, data directory) of a new cluster, its server
    inside `quota` where one is given; stop and remove it afterwards."""
    bin_dir, port = binaries(), free_port()
    home = Path(tempfile.mkdtemp(prefix="atf-bench-pg-"))
    data = home / "data"
    if os.geteuid() == 0:
        shutil.chown(home, "postgres", "postgres")
    try:
        subprocess.run(_as_postgres([str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres",
                                     "--auth=trust", "--no-sync"]),
                       check=True, capture_output=True, text=True)
        with (data / "postgresql.conf").open("a") as conf:
            conf.writelines(f"{name} = {value}\n" for name, value in SETTINGS.items())
            conf.write(f"port = {port}\nunix_socket_directories = '{home}'\n")
        launcher = quota.launcher() if quota is not None else []
        subprocess.run([*launcher, *_pg_ctl(data, "-w", "-l", str(home / "server.log"),
                                            "start")],
                       check=True, capture_output=True, text=True)
        wait_for_port(port, timeout_s=30)
        yield f"postgresql://postgres@127.0.0.1:{port}", data
    finally:
        stop(data)
        shutil.rmtree(home, ignore_errors=True)


@contextlib.contextmanager
def set_up(target: Target, env: Env) -> Iterator[Target]:
    """A copy of `target` that keeps its state where `env` says, its schema set up by the
    driver; what went short there (the copy's notes) is added to `target`'s notes at the end."""
    here = dataclasses.replace(target, env=env, notes=[])
    for command in target.driver.setup_commands(env):
        run_once(command)
    try:
        yield here
    finally:
        target.notes.extend(here.notes)


@contextlib.contextmanager
def private_target(target: Target, database: str) -> Iterator[tuple[Target, Path]]:
    """`set_up` with its store `database` on a new private cluster, and the cluster's data
    directory."""
    with private_cluster() as (server, data), set_up(target, dataclasses.replace(
            target.env, pg_dsn=ensure_database(server, database))) as here:
        yield here, data


def postmaster_pid(data: Path) -> int:
    """The server's main process (first line of postmaster.pid)."""
    return int((data / "postmaster.pid").read_text().splitlines()[0])
