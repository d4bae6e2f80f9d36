"""The machine's own limits, measured in the same run as the systems, so that each figure of
ATF reads as a fraction of what this hardware allows from one client:

- PostgreSQL single-row INSERT + COMMIT per second, one connection (autocommit);
- rows per second of a 1,000-row UPDATE per commit;
- Redis LPUSH + BLMPOP round trips per second, one client.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import psycopg
import redis

#: The limits' own table: a bigint id (its primary key, the one index), a jsonb, a timestamptz.
TABLE = "bench_limit_row"
UPDATE_BATCH = 1000
REDIS_KEY = "bench:limit"


@dataclass(frozen=True, kw_only=True)
class LimitSizes:
    """How much of each loop to time."""

    inserts: int
    updated_rows: int
    redis_round_trips: int


def _fresh_table(conn: psycopg.Connection) -> None:
    conn.execute(f"DROP TABLE IF EXISTS {TABLE}")
    conn.execute(f"CREATE TABLE {TABLE} (id bigserial PRIMARY KEY, payload jsonb NOT NULL, "
                 "at timestamptz NOT NULL)")


def insert_commit_rate(dsn: str, n: int) -> float:
    """Single-row INSERT, each its own committed transaction (autocommit), per second."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        _fresh_table(conn)
        statement = f"INSERT INTO {TABLE} (payload, at) VALUES (%s::jsonb, now())"
        conn.execute(statement, ('{"n": 0}',), prepare=True)  # planned before the clock starts
        started = time.perf_counter()
        for index in range(n):
            conn.execute(statement, (f'{{"n": {index}}}',), prepare=True)
        return n / (time.perf_counter() - started)


def batched_update_rate(dsn: str, rows: int) -> float:
    """Rows per second of UPDATEs of `UPDATE_BATCH` rows by id, one commit per statement."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        _fresh_table(conn)
        conn.execute(f"INSERT INTO {TABLE} (payload, at) SELECT '{{}}', now() "
                     "FROM generate_series(1, %s)", (rows,))
        conn.execute(f"VACUUM ANALYZE {TABLE}")
        statement = (f"UPDATE {TABLE} SET payload = jsonb_build_object('done', true), "
                     "at = now() WHERE id = ANY(%s::bigint[])")
        batches = [list(range(first, min(first + UPDATE_BATCH, rows + 1)))
                   for first in range(1, rows + 1, UPDATE_BATCH)]
        started = time.perf_counter()
        for ids in batches:
            conn.execute(statement, (ids,), prepare=True)
        seconds = time.perf_counter() - started
        conn.execute(f"DROP TABLE {TABLE}")
        return rows / seconds


def redis_round_trip_rate(redis_url: str, n: int) -> float:
    """LPUSH then BLMPOP of the same message, one client, pairs per second."""
    client = redis.Redis.from_url(redis_url)
    client.delete(REDIS_KEY)
    started = time.perf_counter()
    for index in range(n):
        client.lpush(REDIS_KEY, index)
        client.execute_command("BLMPOP", 1, 1, REDIS_KEY, "RIGHT")
    seconds = time.perf_counter() - started
    client.close()
    return n / seconds


def measure(dsn: str, redis_url: str, sizes: LimitSizes) -> dict[str, float]:
    """Every limit once, in the report's keys."""
    return {"pg_insert_commit": insert_commit_rate(dsn, sizes.inserts),
            "pg_update_rows": batched_update_rate(dsn, sizes.updated_rows),
            "redis_round_trip": redis_round_trip_rate(redis_url, sizes.redis_round_trips)}
