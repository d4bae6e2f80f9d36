"""A replacement image waits for ATF to answer: its retries must reach the database afresh."""

from __future__ import annotations

import psycopg
import pytest
from django.db import connection

from workers import replacement


def _end_this_connection() -> None:
    """Have the server end this thread's connection, as a failover or a restart does."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone()
    with psycopg.connect(**connection.get_connection_params(), autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", (pid,))


@pytest.mark.django_db(transaction=True)
def test_a_replacement_retries_its_start_on_a_fresh_connection(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a replacement image whose database connection the server ended (a failover)
    if connection.vendor != "postgresql":
        pytest.skip("terminates a PostgreSQL backend")
    _end_this_connection()
    monkeypatch.setattr(replacement.time, "sleep", lambda _s: None)
    tries: list[int] = []

    def start() -> int:
        tries.append(1)
        assert len(tries) <= 3, "the retries kept failing on the dead connection"
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return len(tries)

    # When it starts, retrying while ATF does not answer
    # Then its first try fails on the ended connection and the next one gets through
    assert replacement.until_reachable(start, replaces="a test") == 2
