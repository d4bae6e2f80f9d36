"""Flow control: concurrency and rate limits per lambda and per limit key, held where tasks start.

A lambda's limits are options (tasks_core.lambda_options: `concurrency`, `rate`,
`key_concurrency`, `key_rate`), read from the directory's cached row the claim already reads,
so a claim, start or finish of lambdas without limits does no work here: no statement, no lock.

For a claim that names tasks of limited lambdas, `admit` runs in the claim's transaction,
before the claim statement: it takes a transaction-scoped lock per limited lambda (or, for
keyed limits only, per lambda and key: keys never wait for each other), counts what runs
(claimed or processing rows) and what started within each rate's window (FlowStart rows), and
lets through, in priority order, only what fits. Every other task goes back to `new`
(`held_at` set), due again when a slot frees: a rate's at the moment its window has room, a
concurrency's when a finish of its lambda releases it (`release`), or after HOLD_RECHECK_S
at the latest. The lock lasts until the claim commits, so two claims anywhere in the fleet
never both see the same free slot. The consumer prunes the rate log (tasks_core.flow_starts).
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Case, Count, Q, Value, When
from django.utils import timezone

from tasks_core import directory, flow_metrics, rates, shards, states, wakeup
from tasks_core.conf import atf_settings
from tasks_core.models import FlowStart, TaskAssoc, TaskEntity
from tasks_core.states import AssocStatus, TaskStatus
from tasks_core.store.values import ClaimedTask, Lease

logger = logging.getLogger(__name__)

#: Seconds a task held by a concurrency limit waits at most before it is tried again, should no
#: finish release it (a slot freed by a task that ended `dead` after its lease lapsed, say).
HOLD_RECHECK_S = 30.0
#: The limits' names, as options, metrics and the API spell them.
CONCURRENCY, RATE, KEY_CONCURRENCY, KEY_RATE = "concurrency", "rate", "key_concurrency", "key_rate"
_RUNNING = (TaskStatus.CLAIMED, TaskStatus.PROCESSING)


@dataclass(frozen=True, kw_only=True)
class Limits:
    """The limits in effect for one lambda (None: no such limit)."""

    lambda_id: int
    concurrency: int | None = None
    rate: rates.Window | None = None
    key_concurrency: int | None = None
    key_rate: rates.Window | None = None

    @property
    def lambda_wide(self) -> bool:
        """A limit over all the lambda's tasks (so one lock per lambda covers its keys too)."""
        return self.concurrency is not None or self.rate is not None

    @property
    def counts_running(self) -> bool:
        return self.concurrency is not None or self.key_concurrency is not None


def of(lambda_id: int) -> Limits | None:
    """The lambda's limits from the directory's cached row; None when it has none."""
    info = directory.by_id(lambda_id)
    if (info.concurrency is None and info.rate_per_s is None and info.key_concurrency is None
            and info.key_rate_per_s is None):
        return None
    return Limits(
        lambda_id=lambda_id, concurrency=info.concurrency, key_concurrency=info.key_concurrency,
        rate=None if info.rate_per_s is None else rates.window(info.rate_per_s),
        key_rate=None if info.key_rate_per_s is None else rates.window(info.key_rate_per_s))


def limited(lambda_ids: Iterable[int]) -> dict[int, Limits]:
    """The limits of those of `lambda_ids` that have any (no query: the directory's cache)."""
    found = {}
    for lambda_id in lambda_ids:
        if (limits := of(lambda_id)) is not None:
            found[lambda_id] = limits
    return found


@dataclass(frozen=True)
class Candidate:
    """A task a claim would start, as the limits see it."""

    task_id: int
    lambda_id: int
    key: str | None
    priority: str


@dataclass(kw_only=True)
class Usage:
    """What runs and what started lately, per lambda and per (lambda, key)."""

    running: Counter = field(default_factory=Counter)  #: lambda id -> running tasks
    running_by_key: Counter = field(default_factory=Counter)  #: (lambda id, key) -> running
    #: (lambda id, key or "") -> starts within the rate's window, oldest first
    starts: dict[tuple[int, str], list[datetime]] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Hold:
    """Why a task may not start now, and when it is due again."""

    limit: str
    until: datetime


def _rank(priority: str) -> int:
    priorities = atf_settings.priorities
    return priorities.index(priority) if priority in priorities else len(priorities)


def _rate_room(log: list[datetime], window: rates.Window, admitted: int, held: int,
               now: datetime) -> tuple[bool, datetime]:
    """Whether one more start fits `window` now, and if not when the next slot frees: the
    start that leaves the window then (held ones queue behind each other, one slot each)."""
    in_window = len(log) + admitted
    if in_window < window.starts:
        return True, now
    # Starts of this claim are at `now`; the (held + 1)-th slot frees when the start that many
    # places from the oldest leaves the window.
    times = log + [now] * admitted
    index = in_window - window.starts + held
    moment = times[index] if index < len(times) else now + timedelta(seconds=window.seconds)
    return False, moment + timedelta(seconds=window.seconds)


def decide(candidates: Sequence[Candidate], limits: Mapping[int, Limits], usage: Usage,
           now: datetime) -> dict[int, Hold]:
    """The candidates that must wait, and why: the others fit every limit of their lambda.

    Pure: the caller has counted `usage` under the lambdas' locks. Candidates are taken in
    priority order, then by id, so a held high-priority task never lets a low one pass it.
    """
    admitted: Counter = Counter()
    held_count: Counter = Counter()
    holds: dict[int, Hold] = {}
    recheck = now + timedelta(seconds=HOLD_RECHECK_S)
    for task in sorted(candidates, key=lambda c: (_rank(c.priority), c.task_id)):
        lim = limits[task.lambda_id]
        lam_key, task_key = (task.lambda_id, ""), (task.lambda_id, task.key or "")
        keyed = task.key is not None
        hold = None
        if lim.concurrency is not None and \
                usage.running[task.lambda_id] + admitted[CONCURRENCY, lam_key] >= lim.concurrency:
            hold = Hold(limit=CONCURRENCY, until=recheck)
        elif keyed and lim.key_concurrency is not None and \
                usage.running_by_key[task_key] + admitted[KEY_CONCURRENCY, task_key] \
                >= lim.key_concurrency:
            hold = Hold(limit=KEY_CONCURRENCY, until=recheck)
        else:
            for name, window, key in ((RATE, lim.rate, lam_key),
                                      (KEY_RATE, lim.key_rate if keyed else None, task_key)):
                if window is None:
                    continue
                fits, until = _rate_room(usage.starts.get(key, []), window,
                                         admitted[name, key], held_count[name, key], now)
                if not fits:
                    held_count[name, key] += 1
                    hold = Hold(limit=name, until=until)
                    break
        if hold is not None:
            holds[task.task_id] = hold
            continue
        admitted[CONCURRENCY, lam_key] += 1
        admitted[KEY_CONCURRENCY, task_key] += 1
        admitted[RATE, lam_key] += 1
        admitted[KEY_RATE, task_key] += 1
    return holds


def lock_id(lambda_id: int, key: str | None = None) -> int:
    """A signed 64-bit advisory lock id for a lambda, or for one of its limit keys."""
    text = f"atf.flow:{lambda_id}" if key is None else f"atf.flow:{lambda_id}:{key}"
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big",
                          signed=True)


def lock(ids: Iterable[int]) -> datetime:
    """Take transaction-scoped locks (released at commit; safe behind a transaction-mode
    pooler) in one order, so that two claims never wait for each other in a cycle; return the
    time once they are held: the database's clock on PostgreSQL, which moves forward from one
    holder of a lock to the next, whatever the hosts' clocks say.
    SQLite has a single writer: a write takes its database lock for the rest of the
    transaction (and the demo's processes share one host's clock)."""
    ordered = sorted(set(ids))
    with shards.connection().cursor() as cursor:
        if shards.connection().vendor == "postgresql":
            cursor.execute("SELECT clock_timestamp() FROM (SELECT count(pg_advisory_xact_lock(k))"
                           " FROM unnest(%s::bigint[]) AS k) AS locked", [ordered])
            (moment,) = cursor.fetchone()
            return moment
        cursor.execute(f"UPDATE {FlowStart._meta.db_table} SET id = id WHERE 0 = 1")
    return timezone.now()


def _candidates(ids: Sequence[int], limits: Mapping[int, Limits]) -> dict[int, Candidate]:
    rows = (TaskEntity.objects.filter(pk__in=ids, lambda_ref_id__in=list(limits))
            .values_list("pk", "lambda_ref_id", "limit_key", "priority"))
    return {pk: Candidate(pk, lambda_id, key, priority) for pk, lambda_id, key, priority in rows}


#: The running tasks of one lambda (`c.lambda_id`), or of one of its keys, counted up to the
#: limit (`c.most`: no decision needs more): one index range of (lambda, status) per running
#: status, each status an equality so that it bounds the range (as an `= ANY`, with statistics
#: that lagged behind, it was a filter over every entry of the lambda, history included).
_RUNNING_OF_ONE = """
SELECT count(*) FROM (
    SELECT 1 FROM {entity} WHERE lambda_ref_id = c.lambda_id AND status = %(claimed)s {key}
    UNION ALL
    SELECT 1 FROM {entity} WHERE lambda_ref_id = c.lambda_id AND status = %(processing)s {key}
    LIMIT c.most) AS running
""".replace("{entity}", TaskEntity._meta.db_table)
_RUNNING_UP_TO_LIMIT = f"""
SELECT c.lambda_id, ({_RUNNING_OF_ONE.replace("{key}", "")})
FROM unnest(%(counting)s::bigint[], %(most)s::bigint[]) AS c(lambda_id, most)
"""
_RUNNING_BY_KEY_UP_TO_LIMIT = f"""
SELECT c.lambda_id, c.key, ({_RUNNING_OF_ONE.replace("{key}", "AND limit_key = c.key")})
FROM unnest(%(lambdas)s::bigint[], %(keys)s::varchar[], %(most)s::bigint[])
    AS c(lambda_id, key, most)
"""
#: Under the locks, in one statement: the tasks of a claim that limited lambdas own (kind
#: "task"), the running tasks of each lambda with a concurrency limit ("running", `n`), and
#: which limited lambdas hold tasks back ("holding"; a finish in the same transaction looks
#: for a held task to release only in those). The tasks are read by primary key (`+ 0` keeps
#: the lambda out of the index choice: with statistics that lag behind, the planner read
#: every task of the lambda to find the claim's few).
_CANDIDATES_AND_RUNNING = f"""
SELECT 'task', id, lambda_ref_id, limit_key, priority, NULL FROM {TaskEntity._meta.db_table}
WHERE id = ANY(%(ids)s::bigint[]) AND lambda_ref_id + 0 = ANY(%(limited)s::bigint[])
UNION ALL
SELECT 'running', NULL, r.lambda_id, NULL, NULL, r.n
FROM ({_RUNNING_UP_TO_LIMIT}) AS r(lambda_id, n)
UNION ALL
SELECT 'holding', NULL, l.id, NULL, NULL, NULL FROM unnest(%(limited)s::bigint[]) AS l(id)
WHERE EXISTS (SELECT 1 FROM {TaskEntity._meta.db_table}
              WHERE lambda_ref_id = l.id AND status = %(new)s AND held_at IS NOT NULL)
"""
_RUNNING_STATUSES = {"claimed": TaskStatus.CLAIMED.value,
                     "processing": TaskStatus.PROCESSING.value}


def _counting(limits: Mapping[int, Limits]) -> dict[int, int]:
    """lambda id -> its concurrency limit, for the lambdas that have one."""
    return {pk: lim.concurrency for pk, lim in limits.items() if lim.concurrency is not None}


def _candidates_and_running(ids: Sequence[int], limits: Mapping[int, Limits],
                            ) -> tuple[dict[int, Candidate], Counter, frozenset[int]]:
    """_CANDIDATES_AND_RUNNING's rows: the candidates, what runs, the lambdas holding tasks."""
    candidates: dict[int, Candidate] = {}
    running: Counter = Counter()
    holding = set()
    counting = _counting(limits)
    with shards.connection().cursor() as cursor:
        cursor.execute(_CANDIDATES_AND_RUNNING, {
            "ids": list(ids), "limited": list(limits), "counting": list(counting),
            "most": list(counting.values()), "new": TaskStatus.NEW.value,
            **_RUNNING_STATUSES})
        for kind, pk, lambda_id, key, priority, count in cursor.fetchall():
            if kind == "task":
                candidates[pk] = Candidate(pk, lambda_id, key, priority)
            elif kind == "running":
                running[lambda_id] = count
            else:
                holding.add(lambda_id)
    return candidates, running, frozenset(holding)


def _running(counting: Mapping[int, int]) -> Counter:
    """lambda id -> tasks of it that run, up to its limit in `counting`."""
    if not counting:
        return Counter()
    if shards.connection().vendor == "postgresql":
        with shards.connection().cursor() as cursor:
            cursor.execute(_RUNNING_UP_TO_LIMIT, {"counting": list(counting),
                                                  "most": list(counting.values()),
                                                  **_RUNNING_STATUSES})
            return Counter(dict(cursor.fetchall()))
    return Counter(dict(
        TaskEntity.objects.filter(lambda_ref_id__in=list(counting), status__in=_RUNNING)
        .values("lambda_ref_id").annotate(n=Count("id")).values_list("lambda_ref_id", "n")))


def _running_by_key(keyed: Mapping[tuple[int, str], int]) -> Counter:
    """(lambda id, key) -> tasks of that key that run, up to its limit in `keyed`."""
    if not keyed:
        return Counter()
    if shards.connection().vendor == "postgresql":
        with shards.connection().cursor() as cursor:
            cursor.execute(_RUNNING_BY_KEY_UP_TO_LIMIT, {
                "lambdas": [pk for pk, _key in keyed], "keys": [key for _pk, key in keyed],
                "most": list(keyed.values()), **_RUNNING_STATUSES})
            return Counter({(pk, key): n for pk, key, n in cursor.fetchall()})
    rows = (TaskEntity.objects
            .filter(lambda_ref_id__in={pk for pk, _ in keyed},
                    limit_key__in={key for _, key in keyed}, status__in=_RUNNING)
            .values("lambda_ref_id", "limit_key").annotate(n=Count("id"))
            .values_list("lambda_ref_id", "limit_key", "n"))
    return Counter({(pk, key): n for pk, key, n in rows if (pk, key) in keyed})


def _usage(candidates: Sequence[Candidate], limits: Mapping[int, Limits], now: datetime, *,
           prune_before: datetime, running: Counter | None = None) -> Usage:
    usage = Usage(running=_running(_counting(limits)) if running is None else running)
    usage.running_by_key = _running_by_key({
        (c.lambda_id, c.key): most for c in candidates
        if c.key is not None and (most := limits[c.lambda_id].key_concurrency) is not None})
    for lambda_id, lim in limits.items():
        logs = []
        if lim.rate is not None:
            logs.append(("", lim.rate))
        if lim.key_rate is not None:
            logs += [(c.key, lim.key_rate) for c in candidates
                     if c.lambda_id == lambda_id and c.key is not None]
        for key, window in dict(logs).items():
            seconds = timedelta(seconds=window.seconds)
            log = FlowStart.objects.filter(lambda_ref_id=lambda_id, key=key)
            log.filter(at__lte=prune_before - seconds).delete()
            usage.starts[lambda_id, key] = list(log.filter(at__gt=now - seconds).order_by("at")
                                                .values_list("at", flat=True))
    return usage


@dataclass(frozen=True, kw_only=True)
class Admission:
    """What `admit` let through: the leases to claim, and what to log of their starts."""

    leases: list[Lease]
    candidates: dict[int, Candidate]
    limits: Mapping[int, Limits]
    now: datetime  #: the time the decision was taken at, under the locks: the claim's time
    #: The tasks this admission held back (a release in the same transaction leaves them).
    held: frozenset[int] = frozenset()
    #: Those of `limits`' lambdas that hold tasks back, as read under the locks; None: not read.
    holding: frozenset[int] | None = None

    def started(self, claimed: Iterable[ClaimedTask], now: datetime) -> None:
        """Log the starts of rate-limited lambdas' tasks (in the claim's transaction)."""
        rows = []
        for task in claimed:
            candidate = self.candidates.get(task.task_id)
            if candidate is None:
                continue
            lim = self.limits[candidate.lambda_id]
            if lim.rate is not None:
                rows.append(FlowStart(lambda_ref_id=candidate.lambda_id, key="", at=now))
            if lim.key_rate is not None and candidate.key is not None:
                rows.append(FlowStart(lambda_ref_id=candidate.lambda_id, key=candidate.key,
                                      at=now))
        if rows:
            FlowStart.objects.bulk_create(rows)


def admit(leases: Sequence[Lease], limits: Mapping[int, Limits], *, now: datetime) -> Admission:
    """Inside the claim's transaction: hold back the tasks of `leases` that no slot of their
    lambda's limits fits (back to `new`, due again when one frees); the rest may be claimed,
    at the Admission's `now` (taken once the locks are held, not the caller's `now`)."""
    ids = [lease.task_id for lease in leases]
    running: Counter | None = None
    holding: frozenset[int] | None = None
    if shards.connection().vendor == "postgresql" and \
            all(lim.lambda_wide for lim in limits.values()):
        # The locks are known before the tasks are read: lock, then read the tasks and count
        # what runs in one statement (its snapshot taken once the locks are held).
        clock = lock(lock_id(lambda_id) for lambda_id in limits)
        candidates, running, holding = _candidates_and_running(ids, limits)
    else:
        candidates = _candidates(ids, limits)
        if not candidates:
            return Admission(leases=list(leases), candidates={}, limits=limits, now=now)
        clock = lock({lock_id(c.lambda_id) if limits[c.lambda_id].lambda_wide
                      else lock_id(c.lambda_id, c.key)
                      for c in candidates.values()
                      if limits[c.lambda_id].lambda_wide or c.key is not None})
    # Decided at the later of the caller's time and the database's: the log is pruned by the
    # database's clock alone, which moves forward from one lock holder to the next, so no
    # claim prunes a start that a later claim still needs to count (whatever its host's clock).
    now = max(now, clock)
    usage = _usage(list(candidates.values()), limits, now, prune_before=clock, running=running)
    holds = decide(list(candidates.values()), limits, usage, now)
    if holds:
        _hold([lease for lease in leases if lease.task_id in holds], holds, now)
        flow_metrics.refused_on_commit(
            Counter((candidates[pk].lambda_id, hold.limit) for pk, hold in holds.items()))
    return Admission(leases=[lease for lease in leases if lease.task_id not in holds],
                     candidates=candidates, limits=limits, now=now, held=frozenset(holds),
                     holding=holding)


def _hold(leases: Sequence[Lease], holds: Mapping[int, Hold], now: datetime) -> None:
    """enqueued -> new for tasks a limit holds, each due again at its hold's `until`."""
    states.check_transition(TaskStatus.ENQUEUED, TaskStatus.NEW)
    guard = Q()
    for lease in leases:
        guard |= Q(pk=lease.task_id, lease=lease.lease)
    ids = list(TaskEntity.objects.select_for_update().filter(guard, status=TaskStatus.ENQUEUED)
               .order_by("pk").values_list("pk", flat=True))
    if not ids:
        return
    TaskEntity.objects.filter(pk__in=ids).update(status=TaskStatus.NEW, worker="", held_at=now)
    TaskAssoc.objects.filter(task_id__in=ids).update(
        status=AssocStatus.NEW,
        next_trigger_at=Case(*[When(task_id=pk, then=Value(holds[pk].until)) for pk in ids]))
    logger.debug("flow limits held %d task(s) at their start", len(ids),
                 extra={"action": "flow_held"})


def release(finished: Iterable[ClaimedTask], now: datetime, *,
            admission: Admission | None = None) -> None:
    """After a finish (in its transaction): for each slot of a concurrency limit that the
    finished tasks free, make the next held task of that lambda (of the same key first, for
    `key_concurrency`) due now, in priority order, and wake the consumers at commit. Tasks of
    lambdas without a concurrency limit cost nothing here (the directory's cache says so).

    `admission`: the claim's of the same transaction, if it came first: the tasks it held are
    not released (no slot was free for them), and where it read which lambdas hold tasks, the
    others' finishes release nothing without a statement."""
    freeing = [(directory.by_name(task.lambda_name).id, task.task_id) for task in finished]
    if admission is not None and admission.holding is not None:
        freeing = [(lambda_id, task_id) for lambda_id, task_id in freeing
                   if lambda_id not in admission.limits or lambda_id in admission.holding]
    _release_slots(freeing, now, besides=admission.held if admission is not None else ())


def release_lapsed(lambda_id: int, task_ids: Iterable[int], now: datetime) -> None:
    """`release` for tasks of one lambda that the consumer ended after their lease lapsed
    (dead on their last attempt, or cancelled): their slots free at once, not at a recheck."""
    _release_slots([(lambda_id, task_id) for task_id in task_ids], now)


def _release_slots(freeing: Iterable[tuple[int, int]], now: datetime, *,
                   besides: Collection[int] = ()) -> None:
    """Release a held task, other than `besides`, for each (lambda id, task id) whose lambda
    counts running tasks."""
    freed = {}
    for lambda_id, task_id in freeing:
        lim = of(lambda_id)
        if lim is not None and lim.counts_running:
            freed[task_id] = lim
    if not freed:
        return
    if shards.connection().vendor == "postgresql":
        chosen = _release_in_one_statement(freed, now, besides)
    else:
        chosen = _release_step_by_step(freed, now, besides)
    if chosen:
        shards.on_commit(wakeup.notify)


#: A finish's release on PostgreSQL, one statement: the slots the finished tasks free (one for
#: the lambda's concurrency, one for their key's), the next held task of each slot (highest
#: priority first, then oldest; one index probe a priority; SKIP LOCKED, so two finishes at
#: once never choose the same task), no longer held and due now.
_RELEASE = """
WITH finished AS (
    SELECT f.id, f.lambda_wide, f.keyed, t.lambda_ref_id, t.limit_key
    FROM unnest(%(ids)s::bigint[], %(lambda_wide)s::boolean[], %(keyed)s::boolean[])
        AS f(id, lambda_wide, keyed)
    JOIN {entity} t ON t.id = f.id
), slots AS (
    SELECT lambda_ref_id AS lambda_id, NULL::varchar AS key, count(*) AS n
    FROM finished WHERE lambda_wide GROUP BY lambda_ref_id
    UNION ALL
    SELECT lambda_ref_id, limit_key, count(*) FROM finished
    WHERE keyed AND limit_key IS NOT NULL GROUP BY lambda_ref_id, limit_key
), chosen AS (
    SELECT DISTINCT h.id FROM slots s CROSS JOIN LATERAL (
        SELECT t.id FROM unnest(%(priorities)s::varchar[]) WITH ORDINALITY AS p(name, rank)
        CROSS JOIN LATERAL (
            SELECT id FROM {entity}
            WHERE lambda_ref_id = s.lambda_id AND priority = p.name AND status = %(new)s
                  AND held_at IS NOT NULL AND run_at <= %(now)s
                  AND (s.key IS NULL OR limit_key = s.key) AND id <> ALL(%(besides)s::bigint[])
            ORDER BY id LIMIT s.n
            FOR UPDATE SKIP LOCKED
        ) t
        ORDER BY p.rank, t.id LIMIT s.n
    ) h
), unheld AS (
    UPDATE {entity} t SET held_at = NULL FROM chosen WHERE t.id = chosen.id RETURNING t.id
)
UPDATE {assoc} a SET next_trigger_at = %(now)s
FROM unheld WHERE a.task_id = unheld.id AND a.status = %(assoc_new)s
RETURNING a.task_id
""".replace("{entity}", TaskEntity._meta.db_table).replace("{assoc}", TaskAssoc._meta.db_table)


def _release_in_one_statement(freed: Mapping[int, Limits], now: datetime,
                              besides: Collection[int]) -> list[int]:
    ids = list(freed)
    with shards.connection().cursor() as cursor:
        cursor.execute(_RELEASE, {
            "ids": ids, "lambda_wide": [freed[pk].concurrency is not None for pk in ids],
            "keyed": [freed[pk].key_concurrency is not None for pk in ids],
            "priorities": list(atf_settings.priorities), "now": now,
            "new": TaskStatus.NEW.value, "assoc_new": AssocStatus.NEW.value,
            "besides": list(besides)})
        return [pk for (pk,) in cursor.fetchall()]


def _release_step_by_step(freed: Mapping[int, Limits], now: datetime,
                          besides: Collection[int]) -> list[int]:
    """The release through the ORM (SQLite: one writer at a time, so no two choose alike)."""
    keys = dict(TaskEntity.objects.filter(pk__in=list(freed)).values_list("pk", "limit_key"))
    slots: Counter = Counter()
    for task_id, lim in freed.items():
        key = keys.get(task_id)
        if lim.key_concurrency is not None and key is not None:
            slots[lim.lambda_id, key] += 1
        if lim.concurrency is not None:
            slots[lim.lambda_id, None] += 1
    chosen: list[int] = []
    for (lambda_id, key), count in slots.items():
        chosen += _next_held(lambda_id, key, count, now, besides=[*besides, *chosen])
    if chosen:
        # No longer held (counted, or chosen by the next release): due now. A claim that finds
        # its limit still full holds it again.
        TaskEntity.objects.filter(pk__in=chosen).update(held_at=None)
        TaskAssoc.objects.filter(task_id__in=chosen, status=AssocStatus.NEW).update(
            next_trigger_at=now)
    return chosen


def _next_held(lambda_id: int, key: str | None, count: int, now: datetime, *,
               besides: Sequence[int] = ()) -> list[int]:
    """Up to `count` held tasks of the lambda (of `key`, if given) other than `besides`,
    highest priority first, then oldest (the task_flow_held indexes, one probe a priority)."""
    held = TaskEntity.objects.filter(lambda_ref_id=lambda_id, status=TaskStatus.NEW,
                                     held_at__isnull=False, run_at__lte=now
                                     ).exclude(pk__in=list(besides))
    if key is not None:
        held = held.filter(limit_key=key)
    chosen: list[int] = []
    for priority in atf_settings.priorities:
        if len(chosen) >= count:
            break
        chosen += held.filter(priority=priority).order_by("pk").values_list(
            "pk", flat=True)[:count - len(chosen)]
    return chosen


def held_counts(lambda_ids: Iterable[int] | None = None) -> dict[int, int]:
    """Tasks held back by a limit now, by lambda (the task_flow_held index)."""
    rows = TaskEntity.objects.filter(status=TaskStatus.NEW, held_at__isnull=False)
    if lambda_ids is not None:
        rows = rows.filter(lambda_ref_id__in=list(lambda_ids))
    return dict(rows.values("lambda_ref_id").annotate(n=Count("id"))
                .values_list("lambda_ref_id", "n"))


def busiest_keys(lambda_id: int, *, most: int = 10) -> list[dict[str, object]]:
    """The limit keys with the most tasks running or held now, most first."""
    by_key: dict[str, Counter] = defaultdict(Counter)
    # One status a query: each reads its own (lambda, status) range of the index, where an
    # `IN` of both could range over every task of the lambda, history included.
    for status, column in ((TaskStatus.CLAIMED, "running"), (TaskStatus.PROCESSING, "running"),
                           (TaskStatus.NEW, "held")):
        rows = TaskEntity.objects.filter(lambda_ref_id=lambda_id, status=status,
                                         limit_key__isnull=False)
        if status == TaskStatus.NEW:
            rows = rows.filter(held_at__isnull=False)
        for key, count in (rows.values("limit_key").annotate(n=Count("id"))
                           .values_list("limit_key", "n")):
            by_key[str(key)][column] += count
    ranked = sorted(by_key.items(), key=lambda item: (-item[1].total(), item[0]))
    return [{"key": key, "running": counts["running"], "held": counts["held"]}
            for key, counts in ranked[:most]]


def summary(lambda_ids: Sequence[int]) -> dict[int, dict[str, Any]]:
    """What the API and the console show of each lambda's flow control: its rates as people
    write them, tasks held back now, starts refused so far by limit, and for keyed limits the
    busiest keys. Two queries for all lambdas, plus one per lambda with keyed limits."""
    held = held_counts(lambda_ids)
    refused = flow_metrics.refused()
    shown: dict[int, dict[str, Any]] = {}
    for lambda_id in lambda_ids:
        info = directory.by_id(lambda_id)
        keyed = info.key_concurrency is not None or info.key_rate_per_s is not None
        shown[lambda_id] = {
            "rate": rates.shown(info.rate_per_s), "key_rate": rates.shown(info.key_rate_per_s),
            "held": held.get(lambda_id, 0),
            "refused": {limit: refused.get((lambda_id, limit), 0)
                        for limit in (CONCURRENCY, RATE, KEY_CONCURRENCY, KEY_RATE)},
            "busiest_keys": busiest_keys(lambda_id) if keyed else [],
        }
    return shown
