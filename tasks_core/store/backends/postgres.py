"""The store's hot batch statements on PostgreSQL: one statement, one round trip, per batch.

Each statement locks the rows it will change in id order (the lock order of tasks_core.store),
changes only those whose status and lease still match (the compare-and-set), updates their
assoc rows in the same statement, and returns what changed. Rows come in as arrays (`unnest`)
or, for new tasks and endings, one JSON document, so a batch of any size is one statement,
and no model object is built on the way. Everything else (heartbeat, release, operators'
actions, chains) is the ORM backend's, which serves both."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from tasks_core import shards
from tasks_core.gating import GateState
from tasks_core.models import (
    SHARDS,
    Collection,
    Lambda,
    TaskAssoc,
    TaskAttempt,
    TaskDependency,
    TaskEntity,
    Worker,
)
from tasks_core.states import ASSOC_DELETED, AssocStatus, TaskStatus
from tasks_core.store.backends.orm import OrmBackend, due_row
from tasks_core.store.decisions import GATE_DROPPED
from tasks_core.store.values import (
    HELD_COLUMNS,
    AssocChange,
    ClaimedTask,
    DueRow,
    Ending,
    Lease,
    Starts,
    Written,
)

_TABLES = {
    "collection": Collection._meta.db_table,
    "entity": TaskEntity._meta.db_table,
    "lambda": Lambda._meta.db_table,
    "assoc": TaskAssoc._meta.db_table,
    "attempt": TaskAttempt._meta.db_table,
    "dependency": TaskDependency._meta.db_table,
    "worker": Worker._meta.db_table,
}


def _sql(template: str) -> str:
    return template.format(**_TABLES)


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value)


#: A prepare threshold no statement reaches by being run again and again: psycopg prepares
#: only what a call asks for (`prepare=True`), never Django's own queries.
ONLY_WHEN_ASKED = 2**31 - 1


def _execute(sql: str, params: Mapping[str, Any], *, prepare: bool) -> list[tuple]:
    """Run a statement with its parameters bound on the server; its rows, if it has any.

    Django's cursors send literal SQL. These statements run many times a second, so with
    `prepare` each is a prepared statement of this connection, parsed and planned once per
    connection; without it (behind a transaction-mode pooler, where the next transaction may
    run on another server connection, one that never saw the statement) each call is parsed
    and planned again. Errors come out as Django's database errors, as from its cursors.
    """
    import psycopg  # here, not at the top: a project on SQLite need not install it

    connection = shards.connection()
    connection.ensure_connection()
    if prepare and connection.connection.prepare_threshold is None:
        # Django's connections come with psycopg's prepares off (a threshold of None), which
        # refuses even a statement asked for by name: only those asked for are prepared.
        connection.connection.prepare_threshold = ONLY_WHEN_ASKED
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(sql, params, prepare=prepare)
        # The result's field count, not `description`, which builds an object per column.
        return cursor.fetchall() if cursor.pgresult and cursor.pgresult.nfields else []


#: A batch of tasks: one JSON array of tasks, each an array of its values in _batch()'s order
#: (psycopg dumps one text far faster than a dozen Python lists as PostgreSQL arrays). The
#: Collection rows the tasks name are made where missing (the arrays are empty once the names
#: are known), in the same statement: no round trip of their own.
_INSERT = _sql("""
WITH collections AS (
    INSERT INTO {collection} (lambda_ref_id, name, gate)
    SELECT c.lambda_ref_id, c.name, %(open)s
    FROM unnest(%(collection_lambda_ids)s::bigint[], %(collection_names)s::varchar[])
        AS c(lambda_ref_id, name)
    ON CONFLICT DO NOTHING
), rows AS (
    SELECT nextval(pg_get_serial_sequence('{entity}', 'id')) AS id, r.ord,
           (r.task->>0)::bigint AS lambda_ref_id, r.task->>1 AS collection,
           r.task->>2 AS priority, r.task->3 AS payload, r.task->>4 AS status,
           (r.task->>5)::int AS max_attempts, (r.task->>6)::timestamptz AS run_at,
           r.task->>7 AS idempotency_key, (r.task->>8)::timestamptz AS finished_at,
           NULLIF(r.task->9, 'null'::jsonb) AS last_error, r.task->>10 AS assoc_status,
           (r.task->>11)::timestamptz AS next_trigger_at, (r.task->>12)::float8 AS timeout_s,
           r.task->>13 AS limit_key, r.task->>14 AS debounce_key,
           (r.task->>15)::bigint AS group_id, (r.task->>16)::int AS group_position
    FROM jsonb_array_elements(%(tasks)s::jsonb) WITH ORDINALITY AS r(task, ord)
), entities AS (
    INSERT INTO {entity} (id, lambda_ref_id, collection, priority, payload, status, attempts,
                          max_attempts, run_at, idempotency_key, lease, worker, created_at,
                          finished_at, last_error, timeout_s, limit_key, debounce_key,
                          group_id, group_position)
    SELECT id, lambda_ref_id, collection, priority, payload, status, 0, max_attempts, run_at,
           idempotency_key, 0, '', %(created_at)s, finished_at, last_error, timeout_s,
           limit_key, debounce_key, group_id, group_position FROM rows
), assocs AS (
    INSERT INTO {assoc} (task_id, lambda_ref_id, collection, priority, status, next_trigger_at,
                         shard)
    SELECT id, lambda_ref_id, collection, priority, assoc_status, next_trigger_at,
           id %% {shards} FROM rows
)
SELECT id FROM rows ORDER BY ord
""".replace("{shards}", str(SHARDS)))

#: One task (every schedule() call): plain values, which bind and plan faster than arrays.
_INSERT_ONE = _sql("""
WITH collection AS (
    INSERT INTO {collection} (lambda_ref_id, name, gate)
    SELECT %(lambda_id)s, %(collection)s, %(open)s WHERE %(new_collection)s
    ON CONFLICT DO NOTHING
), entity AS (
    INSERT INTO {entity} (lambda_ref_id, collection, priority, payload, status, attempts,
                          max_attempts, run_at, idempotency_key, lease, worker, created_at,
                          finished_at, last_error, timeout_s, limit_key, debounce_key)
    VALUES (%(lambda_id)s, %(collection)s, %(priority)s, %(payload)s::jsonb, %(status)s, 0,
            %(max_attempts)s, %(run_at)s, %(key)s, 0, '', %(created_at)s, %(finished_at)s,
            %(last_error)s::jsonb, %(timeout)s, %(limit_key)s, %(debounce_key)s)
    RETURNING id, lambda_ref_id, collection, priority
), assoc AS (
    INSERT INTO {assoc} (task_id, lambda_ref_id, collection, priority, status, next_trigger_at,
                         shard)
    SELECT id, lambda_ref_id, collection, priority, %(assoc_status)s, %(trigger)s,
           id %% {shards} FROM entity
)
SELECT id FROM entity
""".replace("{shards}", str(SHARDS)))

_DUE = _sql("""
WITH due AS (
    -- Priority by priority, highest first, each earliest trigger first: one index probe of
    -- (lambda, priority, next_trigger_at) per priority, and none once the limit is reached.
    SELECT a.task_id, p.rank, a.next_trigger_at
    FROM unnest(%(priorities)s::varchar[]) WITH ORDINALITY AS p(name, rank)
    CROSS JOIN LATERAL (
        SELECT task_id, next_trigger_at FROM {assoc}
        WHERE lambda_ref_id = %(lambda_id)s AND priority = p.name AND next_trigger_at <= %(now)s
              AND NOT status = %(completed)s AND NOT collection = ANY(%(skip)s::varchar[])
        ORDER BY next_trigger_at LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) a
    LIMIT %(limit)s
), locked AS (
    SELECT t.id, t.status, t.lease, t.collection, t.priority, t.attempts, t.max_attempts,
           t.worker, t.started_at, t.cancel_requested_at IS NOT NULL AS cancel_requested,
           due.rank, due.next_trigger_at
    FROM {entity} t JOIN due ON due.task_id = t.id
    ORDER BY t.id
    FOR UPDATE OF t SKIP LOCKED
)
SELECT id, status, lease, collection, priority, attempts, max_attempts, worker, started_at,
       cancel_requested
FROM locked ORDER BY rank, next_trigger_at, id
""")

_MARK_ENQUEUED = _sql("""
WITH bumped AS (
    UPDATE {entity} SET status = %(enqueued)s, lease = lease + 1, enqueued_at = %(now)s
    WHERE id = ANY(%(bump)s::bigint[])
)
-- A kept row (an `enqueued` task whose timeout fired) keeps its enqueued_at: the queue's age
-- is counted from it, and its entity row is not written again.
-- One array (bump || keep), so that the plan is a primary-key probe per row: with OR between
-- two arrays PostgreSQL may read a whole due index instead.
UPDATE {assoc} SET status = %(assoc_status)s, next_trigger_at = %(trigger)s
WHERE task_id = ANY(%(bump)s::bigint[] || %(keep)s::bigint[])
""")

#: The task rows a claim, a start or a finish may write, read one primary-key probe a row in
#: the order of `source` (ids in order). What makes a row current (its lease, its status, its
#: lambda) is checked outside the subquery: `OFFSET 0` keeps the planner from pushing those
#: conditions into it, where they would let it reach the rows through a partial status index
#: instead (task_in_queue for `enqueued`, task_held for `processing`), reading every row of a
#: queue or of the fleet's tasks in flight per task whenever the statistics last saw that
#: index small (measured: 3,009 rows read per claimed task with 110,000 waiting).
#:
#: A claim or a finish locks no row here: its one UPDATE takes each row's lock, in the same
#: order (ids in order: the same lock order in every statement), and checks its guard
#: (`_still_current`) again on the row's newest version if another transaction changed it
#: meanwhile, as PostgreSQL does for an UPDATE's condition: the compare-and-set holds without
#: a lock round of its own, one WAL record and one page write a row fewer. A start (`lock`)
#: does lock its rows here, all of them in id order: its rows go to three UPDATEs by what
#: their gates say (started, held, dropped), which would take their locks in that order
#: instead, and two starts of the same tasks that saw a gate change between them could then
#: each hold a row the other waits for. A stale message's row is read and left as it is.
def _row_by_id(source: str, *, lock: bool = False) -> str:
    return f"""CROSS JOIN LATERAL (
        SELECT id, lease, status, lambda_ref_id, collection FROM {{entity}} WHERE id = {source}.id
        OFFSET 0{" FOR UPDATE" if lock else ""}
    ) t"""


def _current(source: str) -> str:
    """The condition a row read by `_row_by_id` must meet to be written: its lease the
    message's or result's, its status the one the statement expects."""
    return f"t.lease = {source}.lease AND t.status = %(expected)s"


def _still_current(found: str) -> str:
    """An UPDATE's guard: the row it writes still has the lease and the status that `found`
    read (and `_current` checked). Compared with those values, not with the expected status
    itself, and `found` MATERIALIZED (the planner would carry its status condition over
    otherwise), so that no partial status index's condition follows from the UPDATE's: the
    planner reaches each row by its primary key, never through such an index."""
    return f"t.lease = {found}.lease AND t.status = {found}.status"


_CLAIM = _sql("""
WITH wanted AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(leases)s::bigint[]) AS w(id, lease)
), found AS MATERIALIZED (
    SELECT t.id, t.lease, t.status FROM wanted w """ + _row_by_id("w") + """
    WHERE """ + _current("w") + """ AND t.lambda_ref_id = ANY(%(lambda_ids)s::bigint[])
), claimed AS (
    UPDATE {entity} t SET status = %(target)s, lease = t.lease + 1, worker = %(worker)s,
                          claimed_at = %(now)s
    FROM found WHERE t.id = found.id AND """ + _still_current("found") + """
    RETURNING t.id, t.lease, t.lambda_ref_id, t.collection, t.priority, t.payload::text,
              t.attempts, t.max_attempts, t.timeout_s
), assoc AS (
    UPDATE {assoc} a SET status = %(assoc_status)s, next_trigger_at = %(trigger)s
    FROM claimed WHERE a.task_id = claimed.id
)
SELECT * FROM claimed ORDER BY id
""")

#: Gates are read in the statement itself (two primary-key probes a task), so a task of a lambda
#: or collection paused a moment ago never starts: it goes back to `new`, or ends `dropped`.
#: The pieces below are shared by the start and by the claim that starts at once: `locked`
#: (the CTE they build) holds each guarded task's id and what its gates say.
_GATE = """
    CASE WHEN %(dropped)s IN (lg.gate, cg.gate) THEN %(dropped)s
         WHEN %(paused)s IN (lg.gate, cg.gate) THEN %(paused)s
         ELSE %(open)s END AS gate"""
_GATE_JOINS = """
    -- A gate whose `until` has passed is open (tasks_core.gating.effective).
    CROSS JOIN LATERAL (
        SELECT CASE WHEN gate_until <= %(now)s THEN %(open)s ELSE gate END AS gate
        FROM {lambda} WHERE id = t.lambda_ref_id
    ) lg
    LEFT JOIN LATERAL (
        SELECT CASE WHEN gate_until <= %(now)s THEN %(open)s ELSE gate END AS gate
        FROM {collection} WHERE lambda_ref_id = t.lambda_ref_id AND name = t.collection
    ) cg ON true"""
#: A paused gate sends the task back to `new`, due at once; a dropped one ends it `dropped`.
_GATE_STOPS = """
held AS (
    UPDATE {entity} t SET status = %(new)s, worker = ''
    FROM locked WHERE t.id = locked.id AND locked.gate = %(paused)s
    RETURNING t.id
), dropped AS (
    UPDATE {entity} t SET status = %(dropped_status)s, finished_at = %(now)s,
                          last_error = %(dropped_error)s::jsonb
    FROM locked WHERE t.id = locked.id AND locked.gate = %(dropped)s
    RETURNING t.id
), held_assoc AS (
    UPDATE {assoc} a SET status = %(assoc_new)s, next_trigger_at = %(now)s
    FROM held WHERE a.task_id = held.id
), dropped_assoc AS (
    UPDATE {assoc} a SET status = %(assoc_completed)s, next_trigger_at = NULL
    FROM dropped WHERE a.task_id = dropped.id
)"""

_START = _sql("""
WITH wanted AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(leases)s::bigint[], %(assoc_statuses)s::varchar[],
                         %(triggers)s::timestamptz[])
        AS w(id, lease, assoc_status, trigger)
), locked AS (
    SELECT t.id, w.assoc_status, w.trigger, """ + _GATE + """
    FROM wanted w """ + _row_by_id("w", lock=True) + _GATE_JOINS + """
    WHERE """ + _current("w") + """
), started AS (
    UPDATE {entity} t SET status = %(target)s, attempts = t.attempts + 1, started_at = %(now)s,
                          heartbeat_at = %(now)s
    FROM locked WHERE t.id = locked.id AND locked.gate = %(open)s
    RETURNING t.id
), assoc AS (
    UPDATE {assoc} a SET status = locked.assoc_status, next_trigger_at = locked.trigger
    FROM started JOIN locked ON locked.id = started.id WHERE a.task_id = started.id
), """ + _GATE_STOPS + """
SELECT id, %(open)s::text FROM started
UNION ALL SELECT id, %(paused)s::text FROM held
UNION ALL SELECT id, %(dropped)s::text FROM dropped
""")

#: A claim that starts its tasks at once (enqueued -> processing), for a worker's idle
#: executors: the claim's lease, the start's attempt and heartbeat, and the start's gates, in
#: one statement. Each started task's trigger is its lambda's heartbeat timeout (`triggers`,
#: by lambda). Rows: the started tasks (CLAIMED_COLUMNS, gate open) and then the ids a gate
#: held or dropped.
_CLAIM_START = _sql("""
WITH wanted AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(leases)s::bigint[]) AS w(id, lease)
), triggers AS (
    SELECT * FROM unnest(%(trigger_lambda_ids)s::bigint[], %(triggers)s::timestamptz[])
        AS g(lambda_id, trigger)
), locked AS (
    SELECT t.id, """ + _GATE + """
    FROM wanted w """ + _row_by_id("w", lock=True) + _GATE_JOINS + """
    WHERE """ + _current("w") + """ AND t.lambda_ref_id = ANY(%(lambda_ids)s::bigint[])
), started AS (
    UPDATE {entity} t SET status = %(target)s, lease = t.lease + 1, worker = %(worker)s,
                          claimed_at = %(now)s, attempts = t.attempts + 1, started_at = %(now)s,
                          heartbeat_at = %(now)s
    FROM locked WHERE t.id = locked.id AND locked.gate = %(open)s
    RETURNING t.id, t.lease, t.lambda_ref_id, t.collection, t.priority, t.payload::text,
              t.attempts, t.max_attempts, t.timeout_s
), assoc AS (
    UPDATE {assoc} a SET status = %(assoc_started)s, next_trigger_at = triggers.trigger
    FROM started JOIN triggers ON triggers.lambda_id = started.lambda_ref_id
    WHERE a.task_id = started.id
), """ + _GATE_STOPS + """
SELECT %(open)s::text, * FROM started
UNION ALL SELECT %(paused)s::text, id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM held
UNION ALL SELECT %(dropped)s::text, id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
FROM dropped ORDER BY 2
""")

#: The endings come as one JSON array of arrays, each in _endings()'s order, the result last
#: (its JSON text as the executor encoded it, spliced in, never decoded and encoded again):
#: one text to send, where eleven arrays cost the worker far more to build and bind. The ids
#: come as an array too: from it (not from jsonb_array_elements, which the planner guesses at
#: 100 rows) the planner knows the batch's size, and probes the assoc and attempt tables by key
#: instead of reading them whole.
_FINISH = _sql("""
WITH doc AS MATERIALIZED (SELECT %(endings)s::jsonb AS d), ending AS (
    SELECT w.id, (e->>0)::bigint AS lease, e->>1 AS status, NULLIF(e->2, 'null'::jsonb) AS error,
           (e->>3)::timestamptz AS finished_at, e->>4 AS assoc_status,
           (e->>5)::timestamptz AS trigger, e->>6 AS worker, (e->>7)::timestamptz AS started_at,
           e->>8 AS outcome, NULLIF(e->9, 'null'::jsonb) AS result
    FROM unnest(%(ids)s::bigint[]) WITH ORDINALITY AS w(id, n)
    CROSS JOIN LATERAL (SELECT d -> (w.n::int - 1) AS e FROM doc) x
), found AS MATERIALIZED (
    SELECT t.id, t.lease, t.status FROM ending e """ + _row_by_id("e") + """
    WHERE """ + _current("e") + """
), written AS (
    UPDATE {entity} t SET status = e.status, result = COALESCE(e.result, t.result),
                          last_error = COALESCE(e.error, t.last_error),
                          finished_at = COALESCE(e.finished_at, t.finished_at)
    FROM ending e JOIN found ON found.id = e.id
    WHERE t.id = e.id AND """ + _still_current("found") + """
    RETURNING t.id, t.group_id
), assoc AS (
    UPDATE {assoc} a SET status = e.assoc_status, next_trigger_at = e.trigger
    FROM ending e JOIN written ON written.id = e.id
    WHERE a.task_id = e.id AND NOT e.status = ANY(%(assoc_deleted)s::varchar[])
), assoc_deleted AS (
    DELETE FROM {assoc} a USING ending e JOIN written ON written.id = e.id
    WHERE a.task_id = e.id AND e.status = ANY(%(assoc_deleted)s::varchar[])
), history AS (
    INSERT INTO {attempt} (task_id, number, worker, started_at, ended_at, outcome, error)
    -- Numbered after the task's last attempt row, so they count on across requeues (which
    -- reset `attempts`); one probe of (task, number) a row. A success has none: the task's
    -- row holds it (tasks_core.attempt_history).
    SELECT e.id, COALESCE((SELECT max(p.number) FROM {attempt} p WHERE p.task_id = e.id), 0) + 1,
           e.worker, e.started_at, %(now)s, e.outcome, e.error
    FROM ending e JOIN written ON written.id = e.id
    WHERE e.status <> %(success)s
)
SELECT written.id, EXISTS (SELECT 1 FROM {dependency} d WHERE d.parent_id = written.id),
       written.group_id
FROM written
""")


#: The statuses whose assoc row the finish deletes (states.ASSOC_DELETED), as it binds them.
_ASSOC_DELETED = sorted(status.value for status in ASSOC_DELETED)


def _endings(endings: Sequence[Ending]) -> str:
    """_FINISH's document: per ending (in the order of its ids) an array of its values, its
    result's JSON text last."""
    rows = []
    for e in endings:
        values = json.dumps([e.lease, e.status, e.error, _iso(e.finished_at),
                             e.assoc.status, _iso(e.assoc.next_trigger_at), e.worker,
                             _iso(e.started_at), e.outcome])
        rows.append(f"{values[:-1]},{e.result_json or 'null'}]")
    return f"[{','.join(rows)}]"


def _one_row(entity: TaskEntity, assoc: AssocChange, *, new_collection: bool) -> dict[str, Any]:
    """_INSERT_ONE's values of one task (plain values: each array costs more to send)."""
    return {
        "open": GateState.OPEN.value, "new_collection": new_collection,
        "created_at": entity.created_at, "lambda_id": entity.lambda_ref_id,
        "collection": entity.collection, "priority": entity.priority,
        "payload": json.dumps(entity.payload),
        "status": entity.status, "max_attempts": entity.max_attempts, "run_at": entity.run_at,
        "key": entity.idempotency_key, "finished_at": entity.finished_at,
        "last_error": _json(entity.last_error), "timeout": entity.timeout_s,
        "assoc_status": assoc.status, "trigger": assoc.next_trigger_at,
        "limit_key": entity.limit_key, "debounce_key": entity.debounce_key,
    }


def _gate_params() -> dict[str, Any]:
    """The values _GATE and _GATE_STOPS name."""
    return {
        "new": TaskStatus.NEW.value, "dropped_status": TaskStatus.DROPPED.value,
        "open": GateState.OPEN.value, "paused": GateState.PAUSED.value,
        "dropped": GateState.DROPPED.value, "dropped_error": json.dumps(GATE_DROPPED),
        "assoc_new": AssocStatus.NEW.value, "assoc_completed": AssocStatus.COMPLETED.value,
    }


def _starts(by_gate: Mapping[str, set[int]]) -> Starts:
    return Starts(started=by_gate[GateState.OPEN], held=by_gate[GateState.PAUSED],
                  dropped=by_gate[GateState.DROPPED])


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def _batch(entities: Sequence[TaskEntity], assocs: Sequence[AssocChange],
           collections: Sequence[tuple[int, str]]) -> dict[str, Any]:
    """_INSERT's values: the tasks as a JSON array of arrays, in its column order."""
    tasks = [
        [e.lambda_ref_id, e.collection, e.priority, e.payload, e.status, e.max_attempts,
         _iso(e.run_at), e.idempotency_key, _iso(e.finished_at), e.last_error, a.status,
         _iso(a.next_trigger_at), e.timeout_s, e.limit_key, e.debounce_key, e.group_id,
         e.group_position]
        for e, a in zip(entities, assocs, strict=True)
    ]
    return {
        "tasks": json.dumps(tasks, allow_nan=False), "created_at": entities[0].created_at,
        "open": GateState.OPEN.value,
        "collection_lambda_ids": [lambda_id for lambda_id, _name in collections],
        "collection_names": [name for _lambda_id, name in collections],
    }


#: The first key of ATF's advisory locks ("ATF" in ASCII), the second the hash of the key.
EXCLUSIVE_SPACE = 0x415446
EXCLUSIVE = "SELECT pg_advisory_xact_lock(%(space)s, hashtext(%(key)s))"


#: What a worker, and its token's workers, hold: each count stops at its LIMIT (NULL: none), a
#: bound past which the caller learns no more; the statuses are literals, as the partial index
#: task_held names them, so that even a prepared statement's generic plan reads only it. The
#: ending tasks are found by id, and taken off where the worker processes them at that lease.
#: StoreBackend.held_rows in one statement of constant text, by primary key (the ORM's
#: `pk__in` is a statement of its own for every count of ids, each prepared anew).
_HELD_ROWS = _sql("""
SELECT """ + ", ".join("id" if column == "pk" else column for column in HELD_COLUMNS) + """
FROM {entity} WHERE id = ANY(%(ids)s::bigint[]) AND worker = ANY(%(workers)s::varchar[])
""")

HELD_COUNTS = _sql("""
SELECT
  (SELECT count(*) FROM (SELECT 1 FROM {entity}
     WHERE worker = %(worker)s AND status IN ('claimed', 'processing')
     LIMIT %(worker_most)s) AS mine),
  (SELECT count(*) FROM (SELECT 1 FROM {entity}
     WHERE worker = ANY(COALESCE(%(token_workers)s::text[],
                                 ARRAY(SELECT worker_id FROM {worker}
                                       WHERE credential = %(credential)s)))
       AND status IN ('claimed', 'processing')
     LIMIT %(token_most)s) AS token),
  (SELECT count(*) FROM {entity} AS t
     JOIN unnest(%(ids)s::bigint[], %(leases)s::bigint[]) AS e(id, lease)
       ON t.id = e.id AND t.lease = e.lease
     WHERE t.worker = %(worker)s AND t.status = 'processing')
""")


class PostgresBackend(OrmBackend):
    """The ORM backend with its hot batch steps replaced by the statements above; `prepare`:
    each statement is prepared once per connection (off behind a transaction-mode pooler)."""

    insert_is_one_statement = True
    worker_steps_are_one_statement = True

    def __init__(self, *, prepare: bool = True) -> None:
        self.prepare = prepare

    def _run(self, sql: str, params: Mapping[str, Any]) -> list[tuple]:
        return _execute(sql, params, prepare=self.prepare)

    @contextlib.contextmanager
    def exclusive(self, key: str) -> Iterator[None]:
        """The transaction takes an advisory lock on `key` (every server process sees it),
        held until it ends: one statement, and none left behind on the connection, so a
        transaction-mode pooler (PgBouncer) may hand the connection on after the commit."""
        with shards.atomic():
            self._run(EXCLUSIVE, {"space": EXCLUSIVE_SPACE, "key": key})
            yield

    def held_rows(self, ids: Sequence[int], workers: Sequence[str]) -> list[tuple[Any, ...]]:
        return self._run(_HELD_ROWS, {"ids": list(ids), "workers": list(workers)})

    def held(self, worker: str, ending: Sequence[Lease], *, credential: str | None = None,
             worker_most: int | None = None, token_most: int | None = None,
             token_workers: Sequence[str] | None = None) -> tuple[int, int]:
        """One statement with constant text (the ORM's builds an OR of every ending task, and
        reads every held row): each count stops at its bound plus the ending tasks."""
        extra = len(ending)
        ((mine, token, freed),) = self._run(HELD_COUNTS, {
            "worker": worker, "credential": credential or "",
            "worker_most": None if worker_most is None else worker_most + extra,
            "token_most": 0 if credential is None else
            None if token_most is None else token_most + extra,
            "token_workers": None if token_workers is None else list(token_workers),
            "ids": [lease.task_id for lease in ending],
            "leases": [lease.lease for lease in ending]})
        return mine - freed, max(0, token - freed)

    def insert(self, entities: Sequence[TaskEntity], assocs: Sequence[AssocChange], *,
               collections: Sequence[tuple[int, str]] = ()) -> None:
        """One statement, whatever the number of tasks: the ORM's bulk_create spends most of
        its time preparing each field of each object, and needs a round trip per table."""
        if len(entities) == 1 and entities[0].group_id is None:
            rows = self._run(_INSERT_ONE, _one_row(entities[0], assocs[0],
                                                  new_collection=bool(collections)))
        else:
            rows = self._run(_INSERT, _batch(entities, assocs, collections))
        for entity, (pk,) in zip(entities, rows, strict=True):
            entity.pk = pk
            entity._state.adding = False
            entity._state.db = shards.current()

    def due(self, lambda_id: int, *, limit: int, now: datetime, skip_collections: list[str],
            priorities: list[str]) -> list[DueRow]:
        rows = self._run(_DUE, {"lambda_id": lambda_id, "now": now, "limit": limit,
                               "skip": skip_collections, "priorities": priorities,
                               "completed": AssocStatus.COMPLETED.value})
        return [due_row(*row) for row in rows]

    def mark_enqueued(self, *, bump: list[int], keep: list[int], now: datetime,
                      assoc: AssocChange) -> None:
        self._run(_MARK_ENQUEUED, {"bump": bump, "keep": keep, "now": now,
                                  "enqueued": TaskStatus.ENQUEUED.value,
                                  "assoc_status": assoc.status,
                                  "trigger": assoc.next_trigger_at})

    def claim(self, leases: Sequence[Lease], *, lambda_ids: list[int], worker: str,
              now: datetime, assoc: AssocChange) -> list[ClaimedTask]:
        leases = sorted(leases, key=lambda lease: lease.task_id)  # the lock order
        rows = self._run(_CLAIM, {
            "ids": [lease.task_id for lease in leases],
            "leases": [lease.lease for lease in leases], "lambda_ids": lambda_ids,
            "worker": worker, "now": now,
            "trigger": assoc.next_trigger_at, "assoc_status": assoc.status,
            "expected": TaskStatus.ENQUEUED.value, "target": TaskStatus.CLAIMED.value,
        })
        return [
            ClaimedTask.from_row(pk, lease, lambda_id, collection, priority, json.loads(payload),
                                 *rest)
            for pk, lease, lambda_id, collection, priority, payload, *rest in rows
        ]

    def start(self, leases: Sequence[Lease], assocs: Mapping[int, AssocChange], *,
              now: datetime) -> Starts:
        leases = sorted(leases, key=lambda lease: lease.task_id)  # the lock order
        rows = self._run(_START, {
            "ids": [lease.task_id for lease in leases],
            "leases": [lease.lease for lease in leases],
            "assoc_statuses": [assocs[lease.task_id].status for lease in leases],
            "triggers": [assocs[lease.task_id].next_trigger_at for lease in leases],
            "now": now, "expected": TaskStatus.CLAIMED.value,
            "target": TaskStatus.PROCESSING.value, **_gate_params(),
        })
        by_gate: dict[str, set[int]] = {state.value: set() for state in GateState}
        for task_id, gate in rows:
            by_gate[gate].add(task_id)
        return _starts(by_gate)

    def claim_and_start(self, leases: Sequence[Lease], *, lambda_ids: list[int], worker: str,
                        now: datetime,
                        assocs: Mapping[int, AssocChange]) -> tuple[list[ClaimedTask], Starts]:
        leases = sorted(leases, key=lambda lease: lease.task_id)  # the lock order
        rows = self._run(_CLAIM_START, {
            "ids": [lease.task_id for lease in leases],
            "leases": [lease.lease for lease in leases], "lambda_ids": lambda_ids,
            "worker": worker, "now": now,
            "trigger_lambda_ids": list(assocs),
            "triggers": [change.next_trigger_at for change in assocs.values()],
            "assoc_started": AssocStatus.STARTED.value,
            "expected": TaskStatus.ENQUEUED.value, "target": TaskStatus.PROCESSING.value,
            **_gate_params(),
        })
        by_gate: dict[str, set[int]] = {state.value: set() for state in GateState}
        claimed = []
        for gate, pk, lease, lambda_id, collection, priority, payload, *rest in rows:
            by_gate[gate].add(pk)
            if gate == GateState.OPEN:
                claimed.append(ClaimedTask.from_row(pk, lease, lambda_id, collection, priority,
                                                    json.loads(payload), *rest, started=True))
        return claimed, _starts(by_gate)

    def finish(self, endings: Sequence[Ending], *, now: datetime) -> dict[int, Written]:
        endings = sorted(endings, key=lambda e: e.task_id)  # the lock order
        rows = self._run(_FINISH, {"ids": [e.task_id for e in endings],
                                   "endings": _endings(endings), "now": now,
                                   "expected": TaskStatus.PROCESSING.value,
                                   "assoc_deleted": _ASSOC_DELETED,
                                   "success": TaskStatus.SUCCESS.value})
        return {pk: Written(has_children, group_id) for pk, has_children, group_id in rows}
