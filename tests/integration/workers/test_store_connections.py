"""A direct worker's pools of store connections (workers.store_connections), on PostgreSQL.

The process journey (a worker of 16 threads counted on three shards) is in
tests/integration/tasks_core/test_shards.py; here, what each call does with its connection."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest
from django.db import connection, connections, transaction

from tasks_core import shards
from tests.conftest import closing_connections, wait_for
from workers.store_connections import StoreConnections

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL pools")]

_R = TypeVar("_R")


def backend_pid() -> int:
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])


def in_thread(func: Callable[[], _R]) -> _R:
    """`func()` run in a thread of its own (which lets go of its own connections at the end)."""
    answers: list[_R] = []

    def run() -> None:
        with closing_connections():
            answers.append(func())

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    return answers[0]


@pytest.fixture
def pools() -> Iterator[StoreConnections]:
    made = StoreConnections(2)
    yield made
    made.close()


def test_threads_share_the_pools_connections_and_keep_their_own_outside_a_call(
        pools: StoreConnections) -> None:
    # When eight threads each make a call, and then a query of their own (a lambda's)
    def call_then_own() -> tuple[int, int, bool]:
        with pools.lent():
            lent = backend_pid()
        return lent, backend_pid(), connections["default"].pool is None

    answers = [in_thread(call_then_own) for _n in range(8)]
    # Then the calls ran on the pool's connections (at most two), which they gave back, and the
    # threads' own queries on connections of their own, not from the pool
    lent = {pid for pid, _own, _unpooled in answers}
    own = {pid for _lent, pid, _unpooled in answers}
    assert 1 <= len(lent) <= 2
    assert not lent & own
    assert all(unpooled for _lent, _own, unpooled in answers)


def test_a_call_inside_a_call_runs_on_the_same_connection(pools: StoreConnections) -> None:
    def nested() -> tuple[int, int, int]:
        with pools.lent():
            outer = backend_pid()
            with pools.lent():
                inner = backend_pid()
            return outer, inner, backend_pid()

    outer, inner, after = in_thread(nested)
    assert outer == inner == after


def test_a_call_inside_the_threads_own_transaction_runs_in_it(pools: StoreConnections) -> None:
    def in_a_transaction() -> tuple[int, int]:
        with transaction.atomic():
            own = backend_pid()
            with pools.lent():
                return own, backend_pid()

    own, lent = in_thread(in_a_transaction)
    assert own == lent
    assert pools._pools() == []  # and opened no pool, whose connections it would leave idle


def sessions() -> int:
    """Sessions on the test database other than this thread's."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity"
                       " WHERE datname = current_database() AND pid <> pg_backend_pid()")
        return int(cursor.fetchone()[0])


def test_a_pool_makes_its_connections_when_it_opens_and_keeps_them(
        pools: StoreConnections) -> None:
    # Given the sessions before the pool
    before = sessions()
    # When one call that needs one connection is made (its thread's own is closed after it)
    in_thread(backend_pid_lent(pools))
    # Then the pool holds both of its connections (one made on demand, while a call waited
    # for it, outlasted the 0.2 s a call gives a busy shard: it took the shard for down and
    # dropped the messages it had popped for it)
    wait_for(lambda: sessions() == before + 2, timeout_s=10, message="the pool's two sessions")


def backend_pid_lent(pools: StoreConnections) -> Callable[[], int]:
    def call() -> int:
        with pools.lent():
            return backend_pid()

    return call


def test_a_pool_whose_connections_are_all_in_use_is_busy_not_down() -> None:
    # Given a pool of one connection, which one thread holds in the middle of a call
    pools = StoreConnections(1)
    holding, release = threading.Event(), threading.Event()

    def hold() -> int:
        with pools.lent():
            pid = backend_pid()
            holding.set()
            release.wait(10)
        return pid

    holder = threading.Thread(target=lambda: in_thread(hold))
    holder.start()
    try:
        assert holding.wait(10)

        # When another thread's call asks whether the database answers, before its query
        def probe_then_query() -> int:
            with pools.lent():
                shards.pool_answers("default")  # waited 0.2 s and raised: "no connection"
                return backend_pid()

        waiter: list[int] = []
        asking = threading.Thread(target=lambda: waiter.append(in_thread(probe_then_query)))
        asking.start()
        # Then it waits its turn: once the first call ends, it runs on the same connection
        asking.join(0.5)
        assert asking.is_alive()
        release.set()
        asking.join(10)
        assert waiter and waiter[0] > 0
    finally:
        release.set()
        holder.join(10)
        pools.close()
