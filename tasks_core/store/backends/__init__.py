"""The store's backend, chosen once from the database's vendor: PostgreSQL's statements, or the
ORM for SQLite and any other database."""

from __future__ import annotations

import threading

from django.db import connection

from tasks_core import pooling
from tasks_core.store.backends.base import StoreBackend

_lock = threading.Lock()
_chosen: StoreBackend | None = None


def _choose() -> StoreBackend:
    if connection.vendor == "postgresql":
        from tasks_core.store.backends.postgres import PostgresBackend  # needs psycopg

        return PostgresBackend(prepare=pooling.prepare_statements())
    from tasks_core.store.backends.orm import OrmBackend

    return OrmBackend()


def current() -> StoreBackend:
    """The backend of this process's database."""
    global _chosen
    if _chosen is None:
        with _lock:
            if _chosen is None:
                _chosen = _choose()
    return _chosen


def use(backend: StoreBackend | None) -> None:
    """Make `backend` the store's backend (None: choose again from the database); the contract
    tests run the ORM backend on PostgreSQL with this."""
    global _chosen
    with _lock:
        _chosen = backend
