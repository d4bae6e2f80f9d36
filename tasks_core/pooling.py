"""Connection poolers in front of PostgreSQL: whether this process's connections keep a session.

ATF keeps nothing in a database session from one transaction to the next (its consumer's turns
are transaction-scoped locks, workers/turns.py), so it runs behind a pooler in transaction
mode (PgBouncer's `pool_mode = transaction`, pgcat, Supavisor, RDS Proxy) as it does on a
direct connection. Two things would need the session: the store's statements prepared on the
server, and psycopg's automatic prepares of Django's queries (DATABASES OPTIONS
`server_side_binding` with a `prepare_threshold`). Behind such a pooler, a statement prepared
on one server connection and run on another fails, or, should another client have prepared one
of the same name there, runs that one. So each process asks the database once, before the
store prepares anything, whether its connections keep a session:

- by default (ATF_DB_PREPARED_STATEMENTS unset) the store prepares its statements where every
  database of the store keeps the session, and prepares nothing where one does not;
- set on, where the default database does not keep the session the store prepares nothing, the
  process logs an error, and /readyz and `manage.py check --database default` fail (as for
  psycopg's prepares); a shard that does not keep it is checked as by default;
- set off, it prepares nothing and asks nothing.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any

from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from tasks_core import shards
from tasks_core.conf import atf_settings

logger = logging.getLogger(__name__)

SESSION_LOST = (
    "the database connection does not keep its session between transactions (a pooler in "
    "transaction mode?) but {needs} needs it: turn it off, or point DATABASE_URL at the "
    "database or at a pooler in session mode"
)

#: Reentrant: problem() holds it while probe() asks _kept_session().
_lock = threading.RLock()
_problem: str | None = None
_probed = False
#: alias -> whether its connections keep their session, asked once per process.
_kept: dict[str, bool] = {}


def _backend_pid(wrapper: BaseDatabaseWrapper) -> int:
    with wrapper.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone()
    return int(pid)


#: Rounds of session_is_kept's check, each of which must find the first connection's session.
SESSION_CHECKS = 5


def session_is_kept(alias: str = DEFAULT_DB_ALIAS) -> bool:
    """Whether a connection keeps its server session between transactions.

    The first connection runs a transaction; a second connection then holds a transaction open,
    on the server connection the first just gave back if a pooler hands them out (PgBouncer
    reuses the last one freed); the first runs another. Behind a transaction-mode pooler the
    first connection's transaction then runs in another server process. Other clients of the
    pooler can free a server connection between the steps, which the second then takes while
    the first gets its own back by chance (an API process starting beside a busy fleet was
    found keeping its session, prepared its statements and answered 500s): so the check runs
    SESSION_CHECKS times, and the session is kept only if no round moved it.
    """
    first, second = own_connection(alias), own_connection(alias)
    try:
        pid = _backend_pid(first)
        second.ensure_connection()
        for _round in range(SESSION_CHECKS):
            with second.wrap_database_errors, second.connection.transaction():
                second.connection.execute("SELECT 1")
                if _backend_pid(first) != pid:
                    return False
        return True
    finally:
        for wrapper in (first, second):
            with contextlib.suppress(Exception):
                wrapper.close()


def own_connection(alias: str) -> BaseDatabaseWrapper:
    """A connection of its own to `alias`, never one of the process's pool (ATF_DB_POOL_SIZE),
    for a caller that already holds one of the pool's connections: the probe within a request
    (the others may all be held by requests waiting for it), a consumer's turn beside the
    store's work. Taken from the pool, it waited for a connection that only it could free."""
    wrapper = connections[alias]
    return type(wrapper)(unpooled_settings(alias), alias)


def unpooled_settings(alias: str) -> dict[str, Any]:
    """`alias`'s settings without Django's pool (OPTIONS["pool"]): for a connection of its own,
    or a pool of another owner's (a direct worker's, workers/store_connections.py)."""
    settings = connections[alias].settings_dict
    options = {key: value for key, value in settings["OPTIONS"].items() if key != "pool"}
    return {**settings, "OPTIONS": options}


def _session_settings(alias: str) -> list[str]:
    """The settings in effect that need a session kept between transactions."""
    needs = []
    if atf_settings.db_prepared_statements is True:
        needs.append("ATF_DB_PREPARED_STATEMENTS")
    options = connections[alias].settings_dict.get("OPTIONS", {})
    if options.get("server_side_binding") is True and options.get("prepare_threshold") is not None:
        needs.append("DATABASES OPTIONS prepare_threshold (with server_side_binding)")
    return needs


def probe(alias: str = DEFAULT_DB_ALIAS) -> str | None:
    """What is wrong with the session settings of `alias` (PostgreSQL), or None; logged."""
    if connections[alias].vendor != "postgresql":
        return None
    needs = _session_settings(alias)
    if not needs or _kept_session(alias):
        return None
    found = SESSION_LOST.format(needs=" and ".join(needs))
    logger.error("%s", found)
    return found


def problem() -> str | None:
    """This process's finding (probed once, on first use): None when all is well."""
    global _problem, _probed
    if not _probed:
        with _lock:
            if not _probed:
                _problem = probe()
                _probed = True
    return _problem


def _kept_session(alias: str) -> bool:
    """session_is_kept(alias), asked once per process (an error is not kept: asked again)."""
    with _lock:
        if alias not in _kept:
            _kept[alias] = session_is_kept(alias)
        return _kept[alias]


def prepare_statements() -> bool:
    """Whether the store may prepare its statements on the server in this process: not when
    turned off, nor when turned on where the default database does not keep its session (the
    error problem() reports), and else only where every database of the store (each shard) is
    PostgreSQL and keeps it. One that cannot be reached now counts as not keeping it: slower,
    never wrong."""
    asked = atf_settings.db_prepared_statements
    if asked is False or (asked and problem() is not None):
        return False
    keeps = all(_keeps(alias) for alias in shards.aliases())
    logger.info("the store's statements are %sprepared on the server (%s)",
                "" if keeps else "not ",
                "every connection keeps its session" if keeps else
                "a database is not PostgreSQL, is out of reach, or is behind a pooler in "
                "transaction mode")
    return keeps


def _keeps(alias: str) -> bool:
    if connections[alias].vendor != "postgresql":
        return False
    try:
        return _kept_session(alias)
    except DatabaseError as exc:
        logger.warning("could not ask %s whether it keeps its session: %s", alias, exc)
        return False


def forget() -> None:
    """Probe again on next use (tests that change the database's route)."""
    global _problem, _probed
    with _lock:
        _problem, _probed = None, False
        _kept.clear()
