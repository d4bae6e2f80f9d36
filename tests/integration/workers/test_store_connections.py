"""A direct worker's pools of store connections (workers.store_connections), on PostgreSQL.

The process journey (a worker of 16 threads counted on three shards) is in
tests/integration/tasks_core/test_shards.py; here, what each call does with its connection."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest
from django.db import connection, connections

from tasks_core import shards
from workers.store_connections import StoreConnections

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL pools")]

_R = TypeVar("_R")


def backend_pid() -> int:
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])


def in_thread(func: Callable[[], _R]) -> _R:
    """`func()` run in a thread of its own (which lets go of its own connection at the end)."""
    answers: list[_R] = []

    def run() -> None:
        try:
            answers.append(func())
        finally:
            connections["default"].close()

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
