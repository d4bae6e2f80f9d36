"""Shared fixtures: real Redis (its own database, flushed before and after), times, processes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import redis
from django.conf import settings
from django.db import connection, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.signals import connection_created
from django.utils import timezone

from atf_project import database_url
from tasks_core import directory, pooling, queues
from tasks_core.conf import atf_settings
from tasks_core.store import backends
from workers import replacement, turns

if TYPE_CHECKING:
    from tests.netns import WorkerHost
    from tests.pooler import PgBouncer  # it imports this module

ROOT = Path(__file__).resolve().parent.parent
#: Seconds a thread gets, after its test, to close the database connections it opened.
OTHER_CONNECTIONS_GRACE_S = 5.0


@pytest.fixture
def redis_client() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.ping()  # a missing server fails loudly here
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


@pytest.fixture
def queue(redis_client: redis.Redis) -> Iterator[queues.QueueBackend]:
    backend = queues.backend()
    yield backend
    backend.close()


@pytest.fixture
def now() -> datetime:
    return timezone.now()


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None, django_db_blocker: Any) -> None:
    """The test database with no rollup of outcomes yet: migration 0018 marked it as reaching
    the database's creation, before the tasks each test makes (some finished long ago), so
    counts read the rows until a test folds them (tasks_core.outcomes)."""
    from tasks_core.models import OutcomeFold

    with django_db_blocker.unblock():
        OutcomeFold.objects.all().delete()


@pytest.fixture(autouse=True)
def _fresh_directory() -> Iterator[None]:
    directory.clear()
    yield
    directory.clear()


@pytest.fixture(autouse=True)
def _prepared_statements_put_back() -> Iterator[None]:
    """ATF_DB_PREPARED_STATEMENTS is as the test found it when it ends: a value left behind
    went to every later test's processes (subprocess_env), whose first store call then
    opened two connections of its own to probe the session (tasks_core.pooling)."""
    before = atf_settings.db_prepared_statements
    yield
    assert atf_settings.db_prepared_statements == before, \
        "the test left ATF_DB_PREPARED_STATEMENTS changed"


@pytest.fixture(autouse=True)
def _no_turns_connection_left() -> Iterator[None]:
    """A consumer pass opens a connection of its own for its turns (workers.turns): closed
    after each test, or the test database could not be dropped at the end."""
    yield
    turns.reset()


@dataclass(frozen=True)
class _Opened:
    """Where a database connection was opened: its alias, thread and test."""

    alias: str
    thread: threading.Thread
    test: str


#: The database connections that are not the test's own (pytest-django's to close), with where
#: each was opened: those of threads other than the main one, and those the main thread opened
#: while an event loop ran in it (Playwright's sync API keeps one): Django keeps a thread's
#: connections per asyncio context there, apart from the ones pytest-django closes.
_others_opened: weakref.WeakKeyDictionary[BaseDatabaseWrapper, _Opened] = \
    weakref.WeakKeyDictionary()
_opened_lock = threading.Lock()


def _in_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


#: The classes of direct workers' pooled connections (workers.store_connections: one per
#: worker, which keeps its pools on it) that tests used, with the test each was first used in:
#: a worker's run closes its pools when it ends, and a test that calls a DirectTransport itself
#: closes it; pools left open keep their connections.
_worker_pools: weakref.WeakKeyDictionary[type, str] = weakref.WeakKeyDictionary()


def _note_opened(sender: object, connection: BaseDatabaseWrapper, **kwargs: object) -> None:
    if getattr(connection, "gives_back_per_shard", False):  # a worker pool's connection
        with _opened_lock:
            _worker_pools.setdefault(type(connection),
                                     os.environ.get("PYTEST_CURRENT_TEST", "?"))
        return
    thread = threading.current_thread()
    if thread is not threading.main_thread() or _in_event_loop():
        with _opened_lock:
            _others_opened[connection] = _Opened(
                connection.alias, thread, os.environ.get("PYTEST_CURRENT_TEST", "?"))


connection_created.connect(_note_opened, dispatch_uid="tests.conftest._note_opened")


def _left_open() -> list[BaseDatabaseWrapper]:
    with _opened_lock:
        opened = list(_others_opened)
    return [wrapper for wrapper in opened if wrapper.connection is not None]


def _pools_left_open() -> list[type]:
    with _opened_lock:
        return [pooled for pooled in list(_worker_pools)
                if any(not pool.closed for pool in pooled._connection_pools.values())]


@pytest.fixture(autouse=True)
def _no_other_connection_left_open() -> Iterator[None]:
    """The database connections of this process other than the test's own (`_others_opened`)
    are closed by the end of the test: one left open would keep the test database from being
    dropped at the end of the run (`... is being accessed by other users`), and nothing would
    name the test. A thread still finishing (a live server's request) gets a moment; what is
    still open then fails the test, and is closed."""
    yield
    deadline = time.monotonic() + OTHER_CONNECTIONS_GRACE_S
    while ((left := _left_open()) or _pools_left_open()) and time.monotonic() < deadline:
        time.sleep(0.05)
    pools = _pools_left_open()
    with _opened_lock:  # each is reported once, by the test that left it
        found = [_others_opened.pop(wrapper) for wrapper in left]
        pools_found = [_worker_pools.pop(pool) for pool in pools]
    for wrapper in left:  # and closed, so that the run still drops its test database
        with contextlib.suppress(Exception):
            wrapper.connection.close()
    for pooled in pools:
        for pool in pooled._connection_pools.values():
            pool.close()
    assert not found, "database connections left open: " + "; ".join(
        f"{where.alias} of thread {where.thread.name} "
        f"({'running' if where.thread.is_alive() else 'ended'}), opened in {where.test}"
        for where in found)
    assert not pools_found, "a direct worker's connection pool left open (close its " \
        "transport): first used in " + "; ".join(pools_found)


@pytest.fixture(autouse=True)
def _no_process_replacement(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A worker that runs inside the test process and would end its process (a lambda hung
    past its time limit, its heartbeats lost: workers.replacement.end_process) fails its test
    with the reason, instead of executing the test runner's own command line again as a
    `runworker` would (pytest then stops the whole run on an unknown `--replaces` option).
    Tests of the replacement itself run real `runworker` processes."""
    reasons: list[str] = []

    def refuse(reason: str, exit_code: int) -> None:
        reasons.append(f"{reason} (exit status {exit_code})")
        raise SystemExit(exit_code)  # ends the thread that asked, as the process would end

    monkeypatch.setattr(replacement, "end_process", refuse)
    yield
    assert not reasons, f"an in-process worker would have ended the test process: {reasons}"


#: Where the tests' database connections go: straight to PostgreSQL, or through a PgBouncer in
#: transaction or session mode. Tests marked `pooled` run once per route (pytest_generate_tests).
ROUTES = ("direct", "pgbouncer-transaction", "pgbouncer-session")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if ("database_route" in metafunc.fixturenames
            and metafunc.definition.get_closest_marker("pooled") is not None
            and settings.DATABASES["default"]["ENGINE"].endswith("postgresql")):
        metafunc.parametrize("database_route", ROUTES, indirect=True)


@pytest.fixture(scope="session")
def pgbouncers(django_db_setup: None, django_db_blocker: object
               ) -> Iterator[dict[str, PgBouncer]]:
    """A PgBouncer per pool mode in front of the test database, started when first asked for;
    stopped before the test database is dropped, and its server connections gone with it."""
    started: dict[str, PgBouncer] = {}
    yield started
    for bouncer in started.values():
        bouncer.stop()
    if started:
        # Their server connections end a moment after them; the test database is dropped next.
        deadline = time.monotonic() + 10
        with django_db_blocker.unblock():  # type: ignore[attr-defined]
            while _others_on_the_database() and time.monotonic() < deadline:
                time.sleep(0.1)


def _others_on_the_database() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity"
                       " WHERE datname = current_database() AND pid <> pg_backend_pid()")
        return cursor.fetchone() != (0,)


@pytest.fixture
def database_route(request: pytest.FixtureRequest, pgbouncers: dict[str, PgBouncer]
                   ) -> Iterator[str]:
    """This test's route to the database (see ROUTES; "direct" unless the test is `pooled`).

    Through a PgBouncer, every new connection of this process (each thread's) and of the
    processes the test starts (subprocess_env) goes to its port. In session mode the store's
    statements are prepared (ATF_DB_PREPARED_STATEMENTS), which that mode allows.
    """
    route = getattr(request, "param", "direct")
    if route == "direct":
        yield route
        return
    from tests.pooler import PgBouncer

    mode = route.removeprefix("pgbouncer-")
    database = settings.DATABASES["default"]
    if mode not in pgbouncers:
        pgbouncers[mode] = PgBouncer(mode, host=database["HOST"], port=int(database["PORT"]))
    with routed_database(PORT=str(pgbouncers[mode].port), prepared_statements=mode == "session"):
        yield route


@contextlib.contextmanager
def routed_database(*, prepared_statements: bool | None = None, **fields: Any) -> Iterator[None]:
    """Within it, every new connection of this process (each thread's: they all read the one
    settings dict) and of the processes the test starts (subprocess_env) uses the default
    database's settings with `fields` changed (HOST, PORT, NAME, OPTIONS), and
    ATF_DB_PREPARED_STATEMENTS as given (unchanged by default)."""
    database = settings.DATABASES["default"]
    before = {key: database[key] for key in fields}, atf_settings.db_prepared_statements
    connection.close()
    database.update(fields)
    if prepared_statements is not None:
        settings.ATF_DB_PREPARED_STATEMENTS = prepared_statements
    pooling.forget()
    backends.use(None)
    try:
        yield
    finally:
        connection.close()
        turns.reset()
        database.update(before[0])
        settings.ATF_DB_PREPARED_STATEMENTS = before[1]
        pooling.forget()
        backends.use(None)


@contextlib.contextmanager
def closing_connections() -> Iterator[None]:
    """Around the body of a thread a test starts: the thread's database connections (Django's
    and a consumer's turns connection) are closed when it ends, so none is left to keep the
    test database from being dropped."""
    try:
        yield
    finally:
        turns.reset()
        connections.close_all()


def race(*steps: Callable[[], None]) -> None:
    """Run each step in its own thread and connection, all let go at once; re-raise errors."""
    barrier = threading.Barrier(len(steps))
    errors: list[BaseException] = []

    def run(step: Callable[[], None]) -> None:
        try:
            with closing_connections():
                barrier.wait()
                step()
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(step,)) for step in steps]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def wait_for(condition: Callable[[], object], *, timeout_s: float = 30.0,
             interval_s: float = 0.05, message: str = "condition") -> object:
    """Poll `condition` until it returns something truthy; fail after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s}s waiting for {message}")
        time.sleep(interval_s)


def write_waits_on_a_lock() -> bool:
    """Whether a session of this database waits on a lock (read afresh in a transaction)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                       "AND datname = current_database()")
        return cursor.fetchone()[0] > 0


def _text(value: bool | None) -> str:
    """A setting's value as its variable reads it (None: empty)."""
    return "" if value is None else str(value)


def subprocess_env(**overrides: str) -> dict[str, str]:
    """Environment for a manage.py child that uses this test run's database and Redis."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "atf_project.settings",
        "DATABASE_URL": database_url.compose(connection.settings_dict),
        "REDIS_URL": settings.REDIS_URL,
        "ATF_QUEUE_PREFIX": atf_settings.queue_prefix,
        "ATF_DB_PREPARED_STATEMENTS": _text(atf_settings.db_prepared_statements),
        "ATF_LOG_LEVEL": "INFO",
        "PYTHONUNBUFFERED": "1",
    }
    env.update(overrides)
    return env


class Processes:
    """Starts `manage.py` commands as real child processes; stops them all at teardown."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.children: list[subprocess.Popen] = []

    def start(self, *args: str, env: dict[str, str] | None = None,
              python: str = sys.executable, manage: Path = ROOT / "manage.py") -> subprocess.Popen:
        """`python manage.py *args` in manage.py's directory (this repository's by default)."""
        return self.spawn(args[0], [python, str(manage), *args], env=env, cwd=manage.parent)

    def spawn(self, name: str, argv: list[str], *, env: dict[str, str] | None = None,
              cwd: Path = ROOT) -> subprocess.Popen:
        """Start any command (`start` runs manage.py ones) with its output in a log file."""
        log = open(self.log_dir / f"{name}-{len(self.children)}.log", "w")  # noqa: SIM115
        child = subprocess.Popen(
            argv, cwd=cwd, env=env or subprocess_env(), stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        child.log_path = log.name  # type: ignore[attr-defined]
        self.children.append(child)
        return child

    def stop_all(self) -> None:
        for child in self.children:
            # The whole group: a supervisor's worker processes too.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
        for child in self.children:
            child.wait(timeout=10)

    def logs(self) -> str:
        return "\n".join(
            f"--- {c.args[2:]} ---\n{Path(c.log_path).read_text()[-4000:]}"  # type: ignore[attr-defined]
            for c in self.children
        )


@pytest.fixture
def processes(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Processes]:
    procs = Processes(tmp_path)
    yield procs
    procs.stop_all()
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        print(procs.logs())


@pytest.fixture
def worker_hosts() -> Iterator[list[WorkerHost]]:
    """Two worker hosts of their own: a network namespace each, with a veth link to this
    machine (tests/netns.py), deleted at teardown whatever happened. Where namespaces cannot
    be made (not root, no iproute2) the test is skipped with the reason."""
    from tests import netns

    if reason := netns.unavailable():
        pytest.skip(f"worker hosts need network namespaces: {reason}")
    with netns.worker_hosts(2) as hosts:
        yield hosts


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report
