"""Tasks generated straight into ATF's tables, for the store-size measurement: finished ones
(a store's history) and waiting ones (a backlog of delayed or due tasks).

Each generated task looks like a `demo.noop` task that a worker finished: its entity row in
status success (one attempt, its lease bumped by the enqueue and the claim, every timestamp
set, no result), no assoc row (a success's finish deletes it) and no attempt row (the entity's
row holds a success: tasks_core.attempt_history). Rows come from `INSERT … SELECT
generate_series`, with every index in place, one transaction per chunk; ids are 1..N, and the
sequence continues after them. The foreign-key triggers are skipped while they are written
(`session_replication_role = replica`, the server's superuser): the rows are consistent by
construction, and checking each row's references costs more than writing it.

A waiting task (`generate_waiting`) is a `demo.noop` task as `schedule()` leaves it: its entity
row `new`, never attempted, due at its run_at, and its assoc row `new` with that trigger.
"""

from __future__ import annotations

import json
import sys
import time

import psycopg

ENTITY, ASSOC, ATTEMPT, DEPENDENCY = ("tasks_core_taskentity", "tasks_core_taskassoc",
                                      "tasks_core_taskattempt", "tasks_core_taskdependency")
CHUNK = 1_000_000
WORKER = "bench-generated"
#: Each generated finished task's times: `origin` (the first task's creation) plus its place
#: among the generated ones times `spacing_us`.
TIMES = ("LATERAL (SELECT %(origin)s::timestamptz + (g - %(base)s) * %(spacing_us)s "
         "* interval '1 microsecond') AS x(t)")

_ENTITIES = f"""
INSERT INTO {ENTITY} (id, lambda_ref_id, collection, priority, payload, status, attempts,
                      max_attempts, run_at, idempotency_key, timeout_s, lease, worker,
                      created_at, enqueued_at, claimed_at, started_at, heartbeat_at, finished_at,
                      result, last_error)
SELECT g, %(lambda_id)s, 'default', 'default', '{{}}'::jsonb, 'success', 1, 5, t, NULL, NULL,
       2, '{WORKER}', t, t + interval '1 ms', t + interval '2 ms', t + interval '3 ms',
       t + interval '3 ms', t + interval '4 ms', NULL, NULL
FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS g,
     {TIMES}
"""

_WAITING_ENTITIES = """
INSERT INTO {entity} (id, lambda_ref_id, collection, priority, payload, status, attempts,
                      max_attempts, run_at, idempotency_key, timeout_s, lease, worker,
                      created_at)
SELECT g, %(lambda_id)s, 'default', 'default', '{{}}'::jsonb, 'new', 0, 5,
       %(due)s::timestamptz + g * {spacing}, NULL, NULL, 0, '', %(origin)s::timestamptz
FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS g
""".format(entity=ENTITY, spacing="interval '1 microsecond'")
_WAITING_ASSOCS = f"""
INSERT INTO {ASSOC} (task_id, lambda_ref_id, collection, priority, status, next_trigger_at,
                     shard)
SELECT g, %(lambda_id)s, 'default', 'default', 'new',
       %(due)s::timestamptz + g * interval '1 microsecond', g %% 256
FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS g
"""


def forget_above(dsn: str, last_generated: int) -> None:
    """Delete the tasks a measurement made (ids above the generated ones); the sequence goes
    on after the generated ids again."""
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
        conn.execute(f"DELETE FROM {DEPENDENCY} WHERE parent_id > %(n)s OR child_id > %(n)s",
                     {"n": last_generated})
        for table in (ATTEMPT, ASSOC):
            conn.execute(f"DELETE FROM {table} WHERE task_id > %s", (last_generated,))
        conn.execute(f"DELETE FROM {ENTITY} WHERE id > %s", (last_generated,))
        conn.execute("SELECT setval(pg_get_serial_sequence(%s, 'id'), %s, %s)",
                     (ENTITY, max(last_generated, 1), last_generated > 0))


def generate(dsn: str, *, lambda_name: str, first: int, last: int, ended_ago_s: float = 0.0,
             span_s: float | None = None) -> dict[str, float]:
    """Finished tasks with ids first..last, spread evenly over `span_s` seconds (default: one
    a millisecond) that ended `ended_ago_s` ago; the seconds the inserts and the VACUUM
    ANALYZE (and a checkpoint, so that neither is paid during the next measurement) took."""
    count = last - first + 1
    span_s = count / 1000 if span_s is None else span_s
    with psycopg.connect(dsn, autocommit=True) as conn:
        origin = conn.execute("SELECT now() - %s * interval '1 second'",
                              (span_s + ended_ago_s,)).fetchone()[0]
        return _insert(conn, (_ENTITIES,), lambda_name=lambda_name,
                       first=first, last=last, origin=origin, base=first,
                       spacing_us=span_s * 1e6 / count)


def generate_waiting(dsn: str, *, lambda_name: str, first: int, last: int,
                     due_in_s: float) -> dict[str, float]:
    """Waiting tasks with ids first..last, due from `due_in_s` seconds from now on (negative:
    already due), a microsecond apart; timed as `generate`."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        origin, due = conn.execute("SELECT now(), now() + %s * interval '1 second'",
                                   (due_in_s,)).fetchone()
        return _insert(conn, (_WAITING_ENTITIES, _WAITING_ASSOCS), lambda_name=lambda_name,
                       first=first, last=last, origin=origin, due=due)


def _insert(conn: psycopg.Connection, statements: tuple[str, ...], *, lambda_name: str,
            first: int, last: int, **values: object) -> dict[str, float]:
    """Run `statements` for ids first..last, a chunk a transaction, with the foreign-key
    triggers skipped; then move the sequence past them, VACUUM ANALYZE and checkpoint."""
    lambda_id = conn.execute("SELECT id FROM tasks_core_lambda WHERE name = %s",
                             (lambda_name,)).fetchone()[0]
    conn.execute("SET session_replication_role = replica")
    started = time.perf_counter()
    for low in range(first, last + 1, CHUNK):
        params = {"lambda_id": lambda_id, "first": low, "last": min(low + CHUNK - 1, last),
                  **values}
        with conn.transaction():
            for statement in statements:
                conn.execute(statement, params)
    inserted = time.perf_counter()
    conn.execute("RESET session_replication_role")
    conn.execute("SELECT setval(pg_get_serial_sequence(%s, 'id'), %s)", (ENTITY, last))
    conn.execute(f"VACUUM ANALYZE {ENTITY}, {ASSOC}, {ATTEMPT}")
    conn.execute("CHECKPOINT")
    return {"insert_s": inserted - started, "vacuum_s": time.perf_counter() - inserted}


def explain(dsn: str, statement: str, params: dict[str, object]) -> str:
    """`EXPLAIN (ANALYZE, BUFFERS)` of a statement, rolled back so that it changes nothing."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS) {statement}", params).fetchall()
        conn.rollback()
    return "\n".join(row[0] for row in rows)


def main(argv: list[str]) -> None:
    """`python -m bench.store_rows DSN N [ENDED_AGO_S]`: N finished demo.noop tasks (ids 1..N,
    in a store that has none yet), the newest finished ENDED_AGO_S seconds ago (default 0)."""
    if len(argv) not in (3, 4):
        raise SystemExit("usage: python -m bench.store_rows DSN N [ENDED_AGO_S]")
    made = generate(argv[1], lambda_name="demo.noop", first=1, last=int(argv[2]),
                    ended_ago_s=float(argv[3]) if len(argv) == 4 else 0.0)
    print(json.dumps(made))  # noqa: T201 -- the command's answer


if __name__ == "__main__":
    main(sys.argv)
