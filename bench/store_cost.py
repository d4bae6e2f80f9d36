"""The store's cost of one task: what enqueueing and draining a task costs the PostgreSQL server.

For each system whose tasks live in PostgreSQL (ATF, procrastinate, django-tasks' database
backend), on a private cluster of its own (`bench.private_postgres`), so that the cluster-wide
counters hold nothing but that system's work:

1. `n` tasks are enqueued, one call per task (the producer's burst mode: `schedule()` in its
   own transaction for ATF);
2. the system's workers drain them.

Around each phase the counters are read once every client of the database has disconnected
(a PostgreSQL backend reports its statistics when it exits): commits and rows inserted,
updated (HOT among them: updates that touched no index) and deleted from `pg_stat_database`
and `pg_stat_user_tables`; statements from `pg_stat_statements`; WAL bytes, records and
full-page images from `pg_stat_wal`; and the server's CPU (every server process of the
cluster, the exited ones included through the postmaster's children's times). Each is divided
by `n`; the WAL is also split by the table or index each record is for (pg_walinspect),
which says where a system's WAL goes. A CHECKPOINT starts each phase, so each phase pays its
full-page images the same way a store in steady state pays them once per page per checkpoint.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
import psycopg

from bench.private_postgres import postmaster_pid, private_target

if TYPE_CHECKING:
    from bench.measure import Target

logger = logging.getLogger(__name__)

#: What is counted, per task, in each phase (the key suffixes of the results).
COUNTERS = ("statements", "commits", "rows_inserted", "rows_updated", "rows_hot",
            "rows_deleted", "wal_bytes", "wal_records", "wal_fpi", "cpu_us")
PHASES = ("enqueue", "drain")
#: Keys `walrel_<phase>:<relation>`: WAL bytes per task written for one table or index.
WAL_RELATION_PREFIX = "walrel_"
#: Longest wait for every client of the database to have disconnected.
QUIET_TIMEOUT_S = 60.0

_DATABASE = """
SELECT xact_commit, tup_inserted, tup_updated, tup_deleted FROM pg_stat_database
WHERE datname = current_database()
"""
_HOT = "SELECT coalesce(sum(n_tup_hot_upd), 0) FROM pg_stat_user_tables"
_WAL = "SELECT wal_bytes, wal_records, wal_fpi FROM pg_stat_wal"
# Our own reading statements are left out (they name the statistics views).
_STATEMENTS = """
SELECT coalesce(sum(calls), 0) FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND query NOT ILIKE '%pg_stat%' AND query NOT ILIKE '%pg_backend_pid%'
"""
# Each WAL record's bytes, by the relation of its first block (pg_walinspect, PostgreSQL 15+).
_WAL_BY_RELATION = r"""
SELECT coalesce(c.relname, '(no relation)'), sum(w.record_length)
FROM pg_get_wal_records_info(%s, %s) w
LEFT JOIN pg_class c
  ON c.relfilenode = (regexp_match(w.block_ref, 'rel \d+/\d+/(\d+)'))[1]::oid
GROUP BY 1
"""
_OTHERS = """
SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()
"""


@dataclasses.dataclass(frozen=True)
class Reading:
    """The counters at one moment, and the WAL position then."""

    values: Mapping[str, float]
    wal_lsn: str

    def per_task(self, later: Reading, n: int) -> dict[str, float]:
        return {name: (later.values[name] - self.values[name]) / n for name in COUNTERS}


def server_cpu_us(data: Path) -> float:
    """CPU microseconds the cluster's processes have used, exited ones included."""
    main = psutil.Process(postmaster_pid(data))
    times = main.cpu_times()
    total = times.user + times.system + times.children_user + times.children_system
    for child in main.children():
        # A backend that exits between the listing and the read is counted once it is reaped.
        with contextlib.suppress(psutil.NoSuchProcess):
            child_times = child.cpu_times()
            total += child_times.user + child_times.system
    return total * 1e6


def _wait_quiet(conn: psycopg.Connection) -> None:
    """Wait until no other client is connected, so every backend has reported its counts."""
    deadline = time.monotonic() + QUIET_TIMEOUT_S
    while conn.execute(_OTHERS).fetchone()[0] > 0:
        if time.monotonic() > deadline:
            raise RuntimeError("clients still connected to the measured database")
        time.sleep(0.1)


def read(dsn: str, data: Path) -> Reading:
    """The counters now, once every other client is gone."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        _wait_quiet(conn)
        conn.execute("SELECT pg_stat_force_next_flush()")
        commits, inserted, updated, deleted = conn.execute(_DATABASE).fetchone()
        hot = conn.execute(_HOT).fetchone()[0]
        wal_bytes, wal_records, wal_fpi = conn.execute(_WAL).fetchone()
        statements = conn.execute(_STATEMENTS).fetchone()[0]
        lsn = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]
    return Reading({"statements": float(statements), "commits": float(commits),
                    "rows_inserted": float(inserted), "rows_updated": float(updated),
                    "rows_hot": float(hot), "rows_deleted": float(deleted),
                    "wal_bytes": float(wal_bytes), "wal_records": float(wal_records),
                    "wal_fpi": float(wal_fpi), "cpu_us": server_cpu_us(data)},
                   wal_lsn=lsn)


def wal_by_relation(dsn: str, first: Reading, last: Reading, n: int) -> dict[str, float]:
    """WAL bytes per task between two readings, by relation (table or index)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        rows = conn.execute(_WAL_BY_RELATION, (first.wal_lsn, last.wal_lsn)).fetchall()
    return {relation: float(total) / n for relation, total in rows}


def _checkpoint(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CHECKPOINT")


def measure(target: Target, n: int, *, timeout_s: float) -> dict[str, float]:
    """`cost_<phase>_<counter>` per task for one system (nothing for a store not in
    PostgreSQL)."""
    if not target.driver.SCHEMA:
        return {}
    with private_target(target, f"cost_{target.name}") as (here, data):
        dsn = here.env.pg_dsn
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        here.reset()
        figures: dict[str, float] = {}
        _checkpoint(dsn)
        before = read(dsn, data)
        here.produce(task="record", key="cost", n=n, mode="burst")
        enqueued = read(dsn, data)
        _checkpoint(dsn)
        start_of_drain = read(dsn, data)
        with here.fleet() as fleet:
            here.wait_records("cost", n, timeout_s=timeout_s, fleet=fleet)
        drained = read(dsn, data)
        for phase, (first, last) in {"enqueue": (before, enqueued),
                                     "drain": (start_of_drain, drained)}.items():
            for name, value in first.per_task(last, n).items():
                figures[f"cost_{phase}_{name}"] = value
            for relation, value in wal_by_relation(dsn, first, last, n).items():
                figures[f"{WAL_RELATION_PREFIX}{phase}:{relation}"] = value
        logger.info("store cost of %s: %s", target.name,
                    {k: round(v, 2) for k, v in figures.items()})
        return figures
