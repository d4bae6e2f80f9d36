"""Make sure the services `make test` and `make demo` need are there.

For each service named on the command line: use the one that answers; else start the installed
server; else install it with apt-get (when root); else stop with one line saying what to
install. Runs on the standard library (psycopg is imported only to check PostgreSQL logins).

    python scripts/ensure_services.py redis postgres chromium promtool pgbouncer standby iproute2
    python scripts/ensure_services.py redis -- COMMAND ...  # run COMMAND, then stop what it started
    python scripts/ensure_services.py apt PACKAGE ...      # apt-get install, when root

With `-- COMMAND` (make demo), a server this run started (never one that was already running) is
stopped again when the command ends, however it ends: Ctrl-C, a closed terminal or SIGTERM.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import SplitResult, unquote, urlsplit

ROOT = Path(__file__).resolve().parent.parent
VAR = ROOT / "var"
LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379"
#: The database tests/settings.py connects to unless DATABASE_URL says otherwise.
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/test"
CHROMIUM = Path("/usr/bin/chromium")
HBA_MARKER = "# added by ATF for Django (scripts/ensure_services.py)"

logger = logging.getLogger("ensure_services")


class ServiceMissing(Exception):
    """A service cannot be had; the message says what to install or set."""


#: How to stop each server this run started, in the order they were started.
STARTED: list[tuple[str, Callable[[], None]]] = []


def wait_until(condition: Callable[[], bool], *, timeout_s: float) -> bool:
    """Poll `condition` every 0.2 s until it holds; False after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def tcp_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def is_root() -> bool:
    return os.geteuid() == 0


# --- apt-get ------------------------------------------------------------------------------

_apt_updated = False


def apt_install(*packages: str) -> bool:
    """apt-get install `packages` (update first, once); False if not root or no apt-get."""
    global _apt_updated
    if not is_root() or shutil.which("apt-get") is None:
        return False
    VAR.mkdir(exist_ok=True)
    log_path = VAR / "apt.log"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    apt = ["apt-get", "-q", "-o", "DPkg::Lock::Timeout=300"]
    steps = [[*apt, "install", "-y", "--no-install-recommends", *packages]]
    if not _apt_updated:
        steps.insert(0, [*apt, "update"])
    logger.info("installing %s with apt-get (log: %s)", " ".join(packages), log_path)
    with log_path.open("a") as log:
        for step in steps:
            log.write(f"$ {' '.join(step)}\n")
            log.flush()
            done = subprocess.run(step, stdin=subprocess.DEVNULL, stdout=log,
                                  stderr=subprocess.STDOUT, env=env, check=False)
            if done.returncode != 0:
                tail = log_path.read_text(errors="replace").splitlines()[-15:]
                raise ServiceMissing(f"`{' '.join(step)}` failed ({done.returncode}); end of "
                                     f"{log_path}:\n" + "\n".join(tail))
    _apt_updated = True
    return True


# --- Redis --------------------------------------------------------------------------------

def redis_answers(host: str, port: int) -> bool:
    """True if something speaking the Redis protocol answers PING (+PONG, or -NOAUTH …)."""
    try:
        with socket.create_connection((host, port), timeout=1.0) as conn:
            conn.sendall(b"PING\r\n")
            reply = conn.recv(64)
    except OSError:
        return False
    return reply[:1] in (b"+", b"-")


def start_redis(host: str, port: int) -> None:
    workdir = VAR / f"redis-{port}"
    workdir.mkdir(parents=True, exist_ok=True)
    bind = ["::1"] if host == "::1" else ["127.0.0.1", "-::1"]
    subprocess.run(
        ["redis-server", "--daemonize", "yes", "--bind", *bind, "--port", str(port),
         "--save", "", "--appendonly", "no", "--dir", str(workdir),
         "--logfile", str(workdir / "redis.log"), "--pidfile", str(workdir / "redis.pid")],
        check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
    )
    if not wait_until(lambda: redis_answers(host, port), timeout_s=15):
        raise ServiceMissing(f"redis-server did not answer on {host}:{port}; see "
                             f"{workdir / 'redis.log'}")
    logger.info("redis: started redis-server on %s:%s (no persistence; log %s)", host, port,
                workdir / "redis.log")
    pid = int((workdir / "redis.pid").read_text())
    STARTED.append((f"redis-server on {host}:{port}", lambda: stop_redis(pid, host, port)))


def stop_redis(pid: int, host: str, port: int) -> None:
    os.kill(pid, signal.SIGTERM)
    if not wait_until(lambda: not redis_answers(host, port), timeout_s=15):
        raise ServiceMissing(f"redis-server (pid {pid}) still answers on {host}:{port}")


def ensure_redis(url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme == "unix":
        if not Path(parts.path).exists():
            raise ServiceMissing(f"redis: no socket at {parts.path}; start Redis or set REDIS_URL")
        logger.info("redis: using the socket %s", parts.path)
        return
    host, port = parts.hostname or "127.0.0.1", parts.port or 6379
    if redis_answers(host, port):
        logger.info("redis: using the server at %s:%s", host, port)
        return
    if host not in LOCAL_HOSTS:
        raise ServiceMissing(f"redis: nothing answers at {host}:{port}; start it or fix REDIS_URL")
    if shutil.which("redis-server") is None and not apt_install("redis-server"):
        raise ServiceMissing(f"redis: nothing answers at {host}:{port} and redis-server is "
                             "not installed: install it (apt-get install redis-server) or set "
                             "REDIS_URL")
    # Debian's package may have started its own server on the default port.
    if redis_answers(host, port):
        logger.info("redis: using the server the package started at %s:%s", host, port)
        return
    start_redis(host, port)


# --- PostgreSQL ---------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class Cluster:
    """One Debian PostgreSQL cluster, as pg_lsclusters lists it."""

    version: str
    name: str
    port: int
    online: bool

    def ctl(self, action: str) -> None:
        subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", self.version, self.name,
                        action], check=True, stdin=subprocess.DEVNULL)

    @property
    def hba_file(self) -> Path:
        return Path("/etc/postgresql") / self.version / self.name / "pg_hba.conf"


def clusters() -> list[Cluster]:
    if shutil.which("pg_lsclusters") is None:
        return []
    listing = subprocess.run(["pg_lsclusters", "--no-header"], capture_output=True, text=True,
                             check=False).stdout
    found = []
    for line in listing.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[2].isdigit():
            found.append(Cluster(version=fields[0], name=fields[1], port=int(fields[2]),
                                 online=fields[3].startswith("online")))
    return found


def server_versions() -> list[str]:
    """Installed PostgreSQL server versions, newest first."""
    base = Path("/usr/lib/postgresql")
    found = [p.parent.parent.name for p in base.glob("*/bin/postgres")] if base.exists() else []
    return sorted(found, key=lambda v: [int(x) for x in v.split(".") if x.isdigit()],
                  reverse=True)


def postgres_cluster(port: int) -> Cluster:
    """The local cluster on `port`: installed and created first if there is none."""
    if not server_versions() and not apt_install("postgresql"):
        raise ServiceMissing(f"postgres: nothing answers at 127.0.0.1:{port} and PostgreSQL is "
                             "not installed: install it (apt-get install postgresql) or set "
                             "DATABASE_URL")
    if shutil.which("pg_lsclusters") is None or shutil.which("pg_ctlcluster") is None:
        raise ServiceMissing("postgres: Debian's cluster tools (pg_lsclusters, pg_ctlcluster) are "
                             "missing: install postgresql-common, or start PostgreSQL yourself")
    if not clusters() and is_root():
        version = server_versions()[0]
        logger.info("postgres: creating cluster %s/main on port %s", version, port)
        subprocess.run(["pg_createcluster", "--port", str(port), version, "main"], check=True,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    on_port = [c for c in clusters() if c.port == port]
    if not on_port:
        raise ServiceMissing(f"postgres: nothing answers at 127.0.0.1:{port} and no installed "
                             "cluster uses that port: start one or set DATABASE_URL")
    return on_port[0]


def connect_error(parts: SplitResult, dbname: str) -> str | None:
    """Why connecting to `dbname` as the URL's user fails, or None if it works."""
    import psycopg  # from .venv; only needed here

    try:
        with psycopg.connect(host=parts.hostname, port=parts.port or 5432,
                             user=unquote(parts.username or "postgres"),
                             password=unquote(parts.password or "") or None,
                             dbname=dbname, connect_timeout=5):
            return None
    except psycopg.Error as exc:
        return str(exc).strip().splitlines()[-1]


def allow_local_trust(cluster: Cluster) -> None:
    """Let role postgres connect over TCP from this host without a password (test server)."""
    text = cluster.hba_file.read_text()
    if HBA_MARKER in text:
        return
    rules = (f"{HBA_MARKER}\n"
             "host    all    postgres    127.0.0.1/32    trust\n"
             "host    all    postgres    ::1/128         trust\n")
    cluster.hba_file.write_text(rules + text)  # first matching line wins: put ours first
    cluster.ctl("reload")
    logger.info("postgres: %s now lets role postgres in from 127.0.0.1 and ::1 without a "
                "password", cluster.hba_file)


def create_database(parts: SplitResult, dbname: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(host=parts.hostname, port=parts.port or 5432,
                         user=unquote(parts.username or "postgres"),
                         password=unquote(parts.password or "") or None,
                         dbname="postgres", autocommit=True, connect_timeout=5) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
    logger.info("postgres: created database %s", dbname)


def ensure_postgres(url: str) -> None:
    parts = urlsplit(url)
    if not parts.scheme.startswith("postgres"):
        logger.info("database: %s is not PostgreSQL; nothing to start", parts.scheme or url)
        return
    host, port = parts.hostname or "127.0.0.1", parts.port or 5432
    dbname = parts.path.lstrip("/") or "postgres"
    if connect_error(parts, dbname) is None:
        logger.info("postgres: using the server at %s:%s (database %s)", host, port, dbname)
        return
    managed = None
    if not tcp_open(host, port):
        if host not in LOCAL_HOSTS:
            raise ServiceMissing(f"postgres: nothing answers at {host}:{port}; start it or fix "
                                 "DATABASE_URL")
        managed = postgres_cluster(port)
        if not tcp_open(host, port):
            managed.ctl("start")
            if not wait_until(lambda: tcp_open(host, port), timeout_s=60):
                raise ServiceMissing(f"postgres: cluster {managed.version}/{managed.name} did not "
                                     f"answer on port {port} after start")
            logger.info("postgres: started cluster %s/%s on port %s", managed.version,
                        managed.name, port)
            STARTED.append((f"postgres cluster {managed.version}/{managed.name}",
                            functools.partial(managed.ctl, "stop")))
    if (error := connect_error(parts, "postgres")) is not None:
        # Only a server this run installed or started is reconfigured; a running one is the
        # owner's, and we say what is wrong instead.
        if managed is None or not is_root():
            raise ServiceMissing(f"postgres: {host}:{port} refused the login ({error}); allow "
                                 "it in pg_hba.conf or put the credentials in DATABASE_URL")
        allow_local_trust(managed)
        if (error := connect_error(parts, "postgres")) is not None:
            raise ServiceMissing(f"postgres: {host}:{port} still refuses the login: {error}")
    if (error := connect_error(parts, dbname)) is not None:
        if "does not exist" not in error:
            raise ServiceMissing(f"postgres: cannot open database {dbname}: {error}")
        create_database(parts, dbname)
    logger.info("postgres: ready at %s:%s (database %s)", host, port, dbname)


# --- Chromium for the browser tests ---------------------------------------------------------

def ensure_chromium() -> None:
    if CHROMIUM.exists():
        logger.info("chromium: using %s", CHROMIUM)
        return
    if apt_install("chromium", "fonts-liberation") and CHROMIUM.exists():
        logger.info("chromium: installed %s", CHROMIUM)
        return
    # Not fatal: the browser tests say themselves that they cannot run.
    logger.warning("chromium: %s is missing; browser tests need it (apt-get install chromium)",
                   CHROMIUM)


# --- promtool for the alert rules' tests -----------------------------------------------------

def ensure_promtool() -> None:
    """promtool (Debian's `prometheus` package), which checks and unit-tests the shipped alert
    rules (deploy/prometheus/); not fatal: those tests say themselves that they cannot run."""
    if shutil.which("promtool"):
        logger.info("promtool: using %s", shutil.which("promtool"))
        return
    if apt_install("prometheus") and shutil.which("promtool"):
        logger.info("promtool: installed %s", shutil.which("promtool"))
        return
    logger.warning("promtool: not found; the alert rules' tests need it "
                   "(apt-get install prometheus)")


# --- PgBouncer for the pooler tests ----------------------------------------------------------

PGBOUNCER = Path("/usr/sbin/pgbouncer")


def ensure_pgbouncer() -> None:
    """Only the program: the tests start their own PgBouncer on private ports (tests/pooler.py).
    Debian's package may also start a PgBouncer of its own on 6432; the tests do not use it."""
    if PGBOUNCER.exists() or (apt_install("pgbouncer") and PGBOUNCER.exists()):
        logger.info("pgbouncer: using %s", PGBOUNCER)
        return
    raise ServiceMissing("pgbouncer is not installed: install it (apt-get install pgbouncer); "
                         "the tests run ATF through it")


# --- A primary and a standby for the failover tests -----------------------------------------

STANDBY_VERSION = "15"
STANDBY_BIN = Path("/usr/lib/postgresql") / STANDBY_VERSION / "bin"


def ensure_standby() -> None:
    """Only the server binaries: the tests make their own primary and standby on private ports
    (tests/replication.py), never touching the shared server."""
    needed = [STANDBY_BIN / name for name in ("initdb", "pg_ctl", "pg_basebackup")]
    if all(path.exists() for path in needed) or (
            apt_install(f"postgresql-{STANDBY_VERSION}") and all(p.exists() for p in needed)):
        logger.info("standby: using PostgreSQL %s's binaries in %s", STANDBY_VERSION,
                    STANDBY_BIN)
        return
    raise ServiceMissing(f"standby: PostgreSQL {STANDBY_VERSION}'s server binaries are missing "
                         f"from {STANDBY_BIN}: install them (apt-get install "
                         f"postgresql-{STANDBY_VERSION}); the failover tests run a primary and "
                         "a standby of their own")


# --- iproute2 for the worker-host tests -------------------------------------------------------

def ensure_iproute2() -> None:
    """`ip` (Debian's iproute2): the tests put remote workers on hosts of their own, a network
    namespace each (tests/netns.py); not fatal: without it (or without root) those tests say
    why they cannot run."""
    if shutil.which("ip") or (apt_install("iproute2") and shutil.which("ip")):
        logger.info("iproute2: using %s", shutil.which("ip"))
        return
    logger.warning("iproute2: `ip` not found; the worker-host tests need it "
                   "(apt-get install iproute2) and root")


def run_then_stop_started(command: list[str]) -> int:
    """Run `command`; when it ends, stop the servers this run started. Its exit status.

    Ctrl-C and a closed terminal signal the command as well (the same process group), so they
    are only waited out here; a SIGTERM sent to this process alone is passed on.
    """
    child = subprocess.Popen(command)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda signum, frame: child.send_signal(signal.SIGTERM))
    code = child.wait()
    stop_started()
    return code


def stop_started() -> None:
    """Stop the servers this run started, the last one first."""
    while STARTED:
        name, stop = STARTED.pop()
        try:
            stop()
            logger.info("%s: stopped (this command started it)", name)
        except (ServiceMissing, subprocess.CalledProcessError, OSError) as exc:
            logger.error("error: could not stop the %s this command started: %s", name, exc)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("services", nargs="+",
                        help="redis, postgres, chromium, promtool, pgbouncer, standby, "
                             "iproute2; or `apt PACKAGE ...` to install packages")
    command: list[str] = []
    if "--" in argv:
        argv, command = argv[:argv.index("--")], argv[argv.index("--") + 1:]
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="==> %(message)s", stream=sys.stdout)
    steps: dict[str, Callable[[], None]] = {
        "redis": lambda: ensure_redis(os.environ.get("REDIS_URL") or DEFAULT_REDIS_URL),
        "postgres": lambda: ensure_postgres(os.environ.get("DATABASE_URL")
                                            or DEFAULT_DATABASE_URL),
        "chromium": ensure_chromium,
        "promtool": ensure_promtool,
        "pgbouncer": ensure_pgbouncer,
        "standby": ensure_standby,
        "iproute2": ensure_iproute2,
    }
    try:
        if args.services[0] == "apt":
            if not apt_install(*args.services[1:]):
                raise ServiceMissing("apt-get install needs root and apt-get")
            return 0
        for name in args.services:
            if name not in steps:
                parser.error(f"unknown service {name!r}; use {', '.join(steps)}")
            steps[name]()
    except (ServiceMissing, subprocess.CalledProcessError, OSError) as exc:
        logger.error("error: %s", exc)
        if command:
            stop_started()  # what it started for a command that will not run
        return 2
    return run_then_stop_started(command) if command else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
