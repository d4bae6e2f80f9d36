"""A direct worker's own connections to the store: a few per database, shared by its threads.

A worker process writes to the store from several threads: two controllers (claims and the
results they carry), the result writer, the heartbeat, the lambdas' own heartbeats and the
main thread (registering, handing back). Each thread kept a connection to every database it
touched, four or five per shard; a fleet of a hundred processes held five hundred connections
to each primary. Here each call of the worker's transport borrows the connection it needs from
a pool of `ATF_WORKER_DB_CONNECTIONS` (2) per database, which the process's threads share, and
gives it back when the call returns: a call holds one only while it talks to the database,
never while it waits on a queue.

The pools are the worker's own (a subclass of the database's wrapper keeps them apart from any
pool the project configured): a lambda's own queries never wait for the worker's connections,
nor the worker's for a lambda's. Only PostgreSQL databases are pooled; SQLite keeps a
connection per thread, as before.
"""

from __future__ import annotations

import collections
import contextlib
import importlib.util
import logging
import threading
from collections.abc import Iterator
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from tasks_core import pooling, shards
from tasks_core.conf import atf_settings
from tasks_core.shards import CONTROL

logger = logging.getLogger(__name__)

#: Longest wait of a call for one of the pool's connections, where all are lent out, before it
#: fails as a database that does not answer would (the worker's usual retries follow); at most
#: one heartbeat interval, so that a heartbeat waiting its turn keeps within its budget.
BORROW_TIMEOUT_S = 10.0


class _ThreadState(threading.local):
    #: Calls of lent() this thread is in (the outermost swaps the connections in and out).
    depth = 0
    #: This thread's wrappers of the pooled databases, by alias (None: not made yet).
    wrappers: dict[str, BaseDatabaseWrapper] | None = None


class StoreConnections:
    """The pools of one worker process: one per database alias of the store (the control
    database and every shard), `size` connections each; none where `size` is 0."""

    def __init__(self, size: int) -> None:
        if size and importlib.util.find_spec("psycopg_pool") is None:
            logger.warning("psycopg_pool is not installed: each of the worker's threads keeps "
                           "its own connections (pip install psycopg-pool)")
            size = 0
        self.size = size
        self._local = _ThreadState()
        # One wrapper class per instance: its pools (Django keeps them on the class, by alias)
        # are this worker's, and close with it.
        self._wrapper_classes: dict[type[BaseDatabaseWrapper], type[BaseDatabaseWrapper]] = {}
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def lent(self) -> Iterator[None]:
        """Within it, this thread's queries to the store run on the pools' connections, each
        given back at the end. A call inside another (the outermost gives them back), or inside
        a transaction this thread has open, runs on the connections it is already on."""
        # (checked before the pools are opened: a call that runs where it is opens none)
        in_place = self._local.depth or any(connections[alias].in_atomic_block
                                            for alias in _store_aliases())
        own = {} if in_place else self._wrappers()
        if not own:
            self._local.depth += 1
            try:
                yield
            finally:
                self._local.depth -= 1
            return
        saved = {alias: connections[alias] for alias in own}
        for alias, wrapper in own.items():
            connections[alias] = wrapper
        self._local.depth = 1
        try:
            yield
        finally:
            self._local.depth = 0
            for alias, wrapper in own.items():
                _give_back(wrapper)
                connections[alias] = saved[alias]

    def _wrappers(self) -> dict[str, BaseDatabaseWrapper]:
        """This thread's wrappers of the pooled databases, by alias (made on first use)."""
        own = self._local.wrappers
        if own is None:
            own = {alias: self._pooled(alias) for alias in _store_aliases()
                   if self.size and connections[alias].vendor == "postgresql"}
            self._local.wrappers = own
            for wrapper in own.values():
                wrapper.pool.open()  # type: ignore[attr-defined]  # starts making its connections
        return own

    def _pooled(self, alias: str) -> BaseDatabaseWrapper:
        """A wrapper of `alias` whose connections come from this worker's pool of it."""
        settings = pooling.unpooled_settings(alias)
        # All `size` connections are made when the pool opens, and kept: a pool that grew on
        # demand kept a call waiting while it made one, which on a busy database outlasted the
        # 0.2 s that a call gives a shard to answer (shards.POOL_WAIT_S), so the call took the
        # shard for down and dropped the messages it had popped for it.
        pool = {"min_size": self.size, "max_size": self.size,
                "timeout": min(BORROW_TIMEOUT_S, atf_settings.heartbeat_interval_s)}
        # Django's pools require CONN_MAX_AGE 0. A broken connection is found by its query
        # failing (the store retries on a fresh one), not by a check before every borrow.
        pooled = {**settings, "OPTIONS": {**settings["OPTIONS"], "pool": pool},
                  "CONN_MAX_AGE": 0, "CONN_HEALTH_CHECKS": False}
        return self._wrapper_class(type(connections[alias]))(pooled, alias)

    def _wrapper_class(self, cls: type[BaseDatabaseWrapper]) -> type[BaseDatabaseWrapper]:
        with self._lock:
            if cls not in self._wrapper_classes:
                self._wrapper_classes[cls] = _lending(cls, self.size)
            return self._wrapper_classes[cls]

    def check(self) -> None:
        """Drop the pools' idle connections that broke (a restart or a failover breaks them
        all; the pools hand idle ones out first)."""
        for pool in self._pools():
            with contextlib.suppress(Exception):  # a pool closed meanwhile: nothing to check
                pool.check()

    def close(self) -> None:
        """Close the pools (the worker has stopped; its threads hold none)."""
        for pool in self._pools():
            with contextlib.suppress(Exception):
                pool.close()
        with self._lock:
            for cls in self._wrapper_classes.values():
                cls._connection_pools.clear()  # type: ignore[attr-defined]

    def _pools(self) -> list[Any]:
        with self._lock:
            return [pool for cls in self._wrapper_classes.values()
                    for pool in list(cls._connection_pools.values())]  # type: ignore[attr-defined]


def _lending(cls: type[BaseDatabaseWrapper], size: int) -> type[BaseDatabaseWrapper]:
    """A subclass of the database wrapper `cls` with pools of its own (Django keeps them on
    the class, by alias) that counts the connections it has lent out, per alias."""
    lent: collections.Counter[str] = collections.Counter()
    lock = threading.Lock()

    def get_new_connection(self: Any, conn_params: dict[str, Any]) -> Any:
        connection = cls.get_new_connection(self, conn_params)
        with lock:
            lent[self.alias] += 1
        return connection

    def _close(self: Any) -> None:
        held = self.connection is not None
        try:
            cls._close(self)  # type: ignore[attr-defined]
        finally:
            if held:
                with lock:
                    lent[self.alias] -= 1

    def pool_busy(self: Any) -> bool:
        """Whether every connection of this alias's pool is lent out: a call then waits its
        turn (up to the pool's timeout), which says nothing of the database's health."""
        return lent[self.alias] >= size

    attrs: dict[str, Any] = {"_connection_pools": {}, "__module__": __name__,
                             "get_new_connection": get_new_connection, "_close": _close,
                             "pool_busy": pool_busy, "gives_back_per_shard": True}
    return type(f"Worker{cls.__name__}", (cls,), attrs)


def _store_aliases() -> list[str]:
    """The databases the store's calls touch: the control database and every shard."""
    return list(dict.fromkeys([CONTROL, *shards.aliases()]))


def _give_back(wrapper: BaseDatabaseWrapper) -> None:
    """Return the connection `wrapper` holds to its pool (rolled back there if a failure left
    a transaction open); a connection that broke is dropped by the pool."""
    try:
        wrapper.close()
    except Exception:  # noqa: BLE001 - giving back a broken connection may fail; it is dropped
        logger.debug("giving back a connection (%s) failed", wrapper.alias, exc_info=True)
        wrapper.connection = None
