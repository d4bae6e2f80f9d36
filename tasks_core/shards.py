"""The shard registry: which database holds which task, read from the task's id alone.

`ATF_STORE_SHARDS` lists the database aliases (`DATABASES` keys) that hold tasks; a shard's
*slot* is its position in that list. Control data (teams, lambdas and their gates and options,
collections, tokens, workers, periodic tasks) lives in the control database, `default`; tasks
and what hangs off them (assoc rows, attempts, dependencies, steps, progress, traces, groups,
flow starts, and each shard's rollup of its finished tasks) live in the shards.

A task's id says its shard: `id = (slot << SLOT_SHIFT) | sequence`, the sequence being the
shard's own. Slot 0 is today's ids, so an existing store is shard 0 as it is; every id stays
below 2**53 (JSON- and JavaScript-safe). Each shard's id sequences start at its slot's first id
(`prepare`, run when the shard is migrated). Resolving a task's alias is arithmetic and a
tuple index: no lookup table, no query.

The store's code runs "on" one shard at a time (`on`, `using`): `Router` sends the shard
models' queries to it, and the store's raw statements and transactions take its connection.
Every shard database carries the whole schema; its copies of the control rows that the task
tables' foreign keys name (teams, lambdas) and that its claim statements read (lambda and
collection gates) are written by `mirror`, from the lambda sync and every gate change.

A shard that is down costs only its own tasks: the workers' calls split by shard pass an
`unreached` set (`each_part`, `each_group`), so a shard whose connection fails is passed over
(and not tried again for `pass_over_s`) while the others' parts commit; the caller learns which
tasks were not reached. A connection that was open and broke (a failover or restart of the
shard breaks them all) is not the shard being down: the call tries once more on a new one.
Without the set, a failure is raised, as with one database. In a process whose connections
come from a pool (the worker API's), such a call waits at most POOL_WAIT_S for a shard's
connection, not the pool's timeout: a pool that cannot connect to a shard that is down would
otherwise hold the call for all of it. So does a new task placed on a
shard only because it was that shard's turn (`pool_answers`): another shard takes it.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import itertools
import logging
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import Any, TypeVar

from django.apps import apps
from django.conf import settings
from django.db import (
    DEFAULT_DB_ALIAS,
    DatabaseError,
    InterfaceError,
    OperationalError,
    connections,
    transaction,
)
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Model, QuerySet

logger = logging.getLogger(__name__)

#: Bits of a task id below its slot: 2**44 (17.6 trillion) ids per shard.
SLOT_SHIFT = 44
#: Slots an id can name while staying below 2**53.
MAX_SHARDS = 1 << (53 - SLOT_SHIFT)
#: Buckets an idempotency key hashes into; bucket b lives on slot b % shards.
BUCKETS = 4096
#: Seconds a shard that refused a connection is passed over by unkeyed placement.
DOWN_S = 5.0
#: Seconds a shard whose connection failed is passed over by the workers' and consumers'
#: calls that spare it (`each_group`), before one of them tries it again: at most half a
#: heartbeat interval (`pass_over_s`), so that the heartbeat's next try reaches a shard that is
#: back (a failover's promotion) rather than pass it over until its budget ends.
RETRY_S = 1.0
#: Seconds a call that spares a shard that is down (`each_group` with `unreached`) waits for a
#: connection from a pool (a web process's, ATF_DB_POOL_SIZE) to a shard it holds none to:
#: a pool that cannot connect would keep it waiting for the pool's whole timeout, past the
#: call timeout of the remote worker the call serves (half its heartbeat budget).
POOL_WAIT_S = 0.2
#: The control database: teams, lambdas, gates, tokens, workers, periodic tasks.
CONTROL = DEFAULT_DB_ALIAS

#: The models whose rows live in the shards (every other tasks_core model is control data).
SHARD_MODELS = frozenset({"taskentity", "taskassoc", "taskattempt", "taskdependency",
                          "taskstep", "taskprogress", "tasktrace", "taskgroup", "flowstart",
                          # Each shard's rollup of its own finished tasks (summed when read).
                          "outcomeminute", "outcometotal", "outcomefold",
                          "latencyminute"})
_SHARD_LABELS = frozenset(f"tasks_core.{name}" for name in SHARD_MODELS)
#: Control models that each shard keeps a copy of (the task tables' foreign keys name them,
#: the claim statements read their gates), in the order they are written.
MIRRORED = ("team", "lambda", "lambdaoverride", "collection")
#: Mirrored models whose rows control deletes (an override cleared).
_DELETED = frozenset({"lambdaoverride"})

_current: ContextVar[str | None] = ContextVar("atf_shard", default=None)
#: Inside a function that `across` runs on every shard.
_across: ContextVar[bool] = ContextVar("atf_across_shards", default=False)
_T = TypeVar("_T")
_G = TypeVar("_G")
_R = TypeVar("_R")


class ShardError(Exception):
    """A request that cannot be placed on one shard (e.g. parents on different shards)."""


_named: tuple[Any, tuple[str, ...]] = (None, (CONTROL,))


def aliases() -> tuple[str, ...]:
    """The shards' database aliases, by slot (default: the control database alone)."""
    global _named
    named = getattr(settings, "ATF_STORE_SHARDS", None)
    if named is not _named[0]:  # read again only when the setting's value is another object
        _named = (named, tuple(named) if named else (CONTROL,))
    return _named[1]


def sharded() -> bool:
    """Whether tasks live in more than one database."""
    return len(aliases()) > 1


def slot_of(task_id: int) -> int:
    """The slot of the shard that holds the task (or group) `task_id`."""
    return task_id >> SLOT_SHIFT


def alias_of(task_id: int) -> str:
    """The database alias of the shard that holds the task (or group) `task_id`; an id of no
    shard's slot is looked for (and not found) on slot 0's."""
    names = aliases()
    slot = task_id >> SLOT_SHIFT
    return names[slot] if 0 <= slot < len(names) else names[0]


def first_id(slot: int) -> int:
    """The lowest id of a shard's tasks."""
    return slot << SLOT_SHIFT


def current() -> str:
    """The shard the store works on now (default: slot 0)."""
    return _current.get() or aliases()[0]


@contextlib.contextmanager
def using(alias: str) -> Iterator[str]:
    """Within it, the store's reads and writes of task rows go to shard `alias`."""
    token = _current.set(alias)
    try:
        yield alias
    finally:
        _current.reset(token)


def on(task_id: int) -> contextlib.AbstractContextManager[str]:
    """`using` the shard that holds `task_id`."""
    return using(alias_of(task_id))


def split(items: Iterable[_T], task_id: Callable[[_T], int]) -> dict[str, list[_T]]:
    """`items` by the alias of their shard (`task_id(item)`: the id that places it), each
    list in the items' order; one entry where there is one shard."""
    names = aliases()
    if len(names) == 1:
        return {names[0]: list(items)}
    groups: dict[str, list[_T]] = {}
    for item in items:
        groups.setdefault(alias_of(task_id(item)), []).append(item)
    return groups


def atomic(*, savepoint: bool = True) -> transaction.Atomic:
    """`transaction.atomic` on the shard the store works on now."""
    return transaction.atomic(using=current(), savepoint=savepoint)


@contextlib.contextmanager
def one_snapshot() -> Iterator[None]:
    """The reads inside see one state of the shard the store works on: a read-only
    REPEATABLE READ transaction on PostgreSQL, a transaction on SQLite (whose reads in one see
    one state). For counts made of several statements (rows, the rollup, its mark) that a
    commit between them would count twice or miss. Inside a transaction the caller opened,
    that transaction's own isolation holds (its level cannot change once it has read)."""
    if connection().in_atomic_block:
        yield
        return
    with atomic():
        if connection().vendor == "postgresql":
            with connection().cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        yield


def on_commit(func: Callable[[], Any]) -> None:
    """`transaction.on_commit` of the shard the store works on now; `func` runs on that
    shard too (a wake-up goes to its consumers)."""
    alias = current()
    if not sharded():
        transaction.on_commit(func, using=alias)
        return

    def run() -> None:
        with using(alias):
            func()

    transaction.on_commit(run, using=alias)


def connection() -> BaseDatabaseWrapper:
    """The connection (of this thread) to the shard the store works on now."""
    return connections[current()]


class _Outages:
    """Shards whose connection failed a moment ago, per process: the workers' and consumers'
    calls that spare a shard that is down (`each_group`) pass it over for RETRY_S rather than
    pay a connection attempt (and its timeout) in every call."""

    def __init__(self) -> None:
        self._until: dict[str, float] = {}
        self._lock = threading.Lock()

    def down(self, alias: str) -> bool:
        return self._until.get(alias, 0.0) > time.monotonic()

    def failed(self, alias: str) -> None:
        with self._lock:
            self._until[alias] = time.monotonic() + pass_over_s()

    def answered(self, alias: str) -> None:
        if alias in self._until:
            with self._lock:
                self._until.pop(alias, None)


outages = _Outages()


def pass_over_s() -> float:
    """Seconds a shard whose connection failed is passed over (RETRY_S, at most half a
    heartbeat interval)."""
    from tasks_core.conf import atf_settings

    return min(RETRY_S, atf_settings.heartbeat_interval_s / 2)


def each_part(items: Iterable[_T], task_id: Callable[[_T], int],
              work: Callable[[list[_T]], _R], unreached: set[int] | None = None) -> list[_R]:
    """`work(part)` of each shard's part of `items` (`task_id(item)`: the id that places
    it), on that shard: the answers, one per part reached; one part, all of `items`, where
    there is one shard. With `unreached`, as `each_group` says."""
    return each_group(split(items, task_id), work,
                      lambda part: (task_id(item) for item in part), unreached)


def each_group(groups: Mapping[str, _G], work: Callable[[_G], _R],
               ids: Callable[[_G], Iterable[int]] = lambda _group: (),
               unreached: set[int] | None = None) -> list[_R]:
    """`work(group)` of each shard's group (`groups`: by alias), on that shard: the answers,
    one per group reached.

    With `unreached` (a set) and shards, a shard that cannot be reached costs only its own
    group: where its connection fails (OperationalError, InterfaceError: a server down,
    restarting, cut off), the task ids of its group (`ids(group)`) join `unreached` and the
    next group follows; a shard that failed within `pass_over_s` is not tried again (its ids
    join at once). A connection opened before the call that broke is replaced once at once
    (`_work_on`). `work` must be one transaction, or harmless to repeat: a group that failed may
    have been written or not. Without `unreached` (or with one shard), a failure is raised,
    as it always was."""
    answers: list[_R] = []
    for alias, group in groups.items():
        if unreached is None or not sharded():
            with using(alias):
                answers.append(work(group))
            _hand_back(alias)
            continue
        if outages.down(alias):
            unreached.update(ids(group))
            continue
        try:
            answers.append(_work_on(alias, group, work))
        except (OperationalError, InterfaceError) as exc:
            if not unreachable(exc):
                raise
            outages.failed(alias)
            unreached.update(ids(group))
            logger.debug("shard %s unreachable: %s", alias, exc)
            _let_go(alias)
        else:
            outages.answered(alias)
            _hand_back(alias)
    return answers


def _hand_back(alias: str) -> None:
    """A connection a worker's pool lent for a call (workers.store_connections) goes back as
    soon as the call's part on its shard is done, not when the whole call is: the next shard's
    part may take as long again."""
    wrapper = connections[alias]
    if getattr(wrapper, "gives_back_per_shard", False) and not wrapper.in_atomic_block:
        wrapper.close()


def _work_on(alias: str, group: _G, work: Callable[[_G], _R]) -> _R:
    """`work(group)` on shard `alias`. Where it failed on a connection opened before it (this
    thread's, or one from a pool), it is done once more, at once, on a new one: a failover or a
    restart of the shard breaks every connection that was open, and each thread finds its own
    broken when it next uses it, while the shard (its new primary) answers a new one. Only a
    new connection that fails says the shard is down; without the second try, each thread's
    broken connection passed the shard over for every call of the process, the heartbeat's
    included, long after the shard was back."""
    wrapper = connections[alias]
    with using(alias):
        pool_answers(alias)
        opened_before = wrapper.connection is not None or getattr(wrapper, "pool", None) \
            is not None
        try:
            return work(group)
        except (OperationalError, InterfaceError) as exc:
            if not opened_before or wrapper.in_atomic_block or not unreachable(exc):
                raise
            logger.debug("shard %s: a connection opened before broke (%s); once more on a new "
                         "one", alias, exc)
        _let_go(alias)
        pool_answers(alias)
        return work(group)


def _let_go(alias: str) -> None:
    """Close this thread's connection to `alias` (broken: the next opens anew) and drop its
    pool's broken connections."""
    with contextlib.suppress(Exception):
        connections[alias].close()
    _drop_broken(alias)


def pool_answers(alias: str) -> None:
    """OperationalError unless the pool of `alias` (where its connections come from one, and
    this thread holds none) hands out a connection within POOL_WAIT_S; the connection goes
    back to it at once, for the work's own. For a call that has somewhere else to go (the
    other shards, another shard in turn): a pool that is exhausted that long reads as a shard
    that is down for this call: safe (its tasks are neither renewed nor lost), and rare (a web
    process lets no more requests run than its pool has connections)."""
    wrapper = connections[alias]
    pool = getattr(wrapper, "pool", None)
    busy = getattr(wrapper, "pool_busy", None)  # a worker's pool: it counts what it lent
    if pool is None or wrapper.connection is not None or (busy is not None and busy()):
        return  # a pool whose every connection is in use: the call waits its turn
    from psycopg_pool import PoolTimeout  # only a process with a pool needs it

    pool.open()  # as Django's first connection opens it
    try:
        pooled = pool.getconn(timeout=POOL_WAIT_S)
    except PoolTimeout as exc:
        raise OperationalError(f"no connection to shard {alias} within {POOL_WAIT_S}s") \
            from exc
    pool.putconn(pooled)


def _drop_broken(alias: str) -> None:
    """Where the connections of `alias` come from a pool, check its idle ones now and drop
    those that broke with the shard (a restart or failover breaks them all): the pool hands
    them out first, and a request that draws several in a row waits a growing backoff between
    them (1 s, 2 s, ...), up to the pool's timeout. The pool replaces each at once."""
    pool = getattr(connections[alias], "pool", None)
    if pool is not None:
        with contextlib.suppress(Exception):  # a pool closed meanwhile: nothing to check
            pool.check()


def unreachable(exc: Exception) -> bool:
    """Whether `exc` says the database could not be reached (no connection, one lost, a
    server shutting down or starting), not that a statement failed (a deadlock, a timeout)."""
    if isinstance(exc, InterfaceError):
        return True
    state = getattr(exc.__cause__, "sqlstate", None)
    return state is None or state.startswith(("08", "57P"))


def per_shard(items: Sequence[_T], task_id: Callable[[_T], int],
              work: Callable[[Sequence[_T]], list[_R]], *,
              unreached: set[int] | None = None, missing: Any = None) -> list[_R]:
    """`work(part)` of each shard's part of `items`, on that shard; its results (one per
    item) back in the items' order. One shard: `work(items)` as it is. With `unreached`, as
    `each_part` says: the items of a shard that cannot be reached get `missing`."""
    if not sharded():
        return work(items)
    results: dict[int, _R] = {}
    positions = {id(item): index for index, item in enumerate(items)}

    def work_on(part: list[_T]) -> None:
        for item, result in zip(part, work(part), strict=True):
            results[positions[id(item)]] = result

    each_part(items, task_id, work_on, unreached)
    return [results.get(index, missing) for index in range(len(items))]


def by_task(func: Callable[..., _R]) -> Callable[..., _R]:
    """Run `func(task_id, ...)` on the shard of its first argument, a task id."""

    @functools.wraps(func)
    def on_its_shard(task_id: int, *args: Any, **kwargs: Any) -> _R:
        with using(alias_of(task_id)):
            return func(task_id, *args, **kwargs)

    return on_its_shard


def each(task_ids: Iterable[int]) -> Iterator[list[int]]:
    """Each shard's part of `task_ids`, the store working on that shard while the caller
    handles it (one part, `task_ids` as a list, where there is one shard)."""
    for alias, part in split(task_ids, int).items():
        with using(alias):
            yield part


class Merged:
    """A queryset of task rows ordered by id, read on every shard and merged: filters and
    orderings are applied to it on each shard, a slice `[a:b]` reads the first `b` rows of
    each shard and keeps `[a:b]` of them all in id order (ids are unique across shards)."""

    def __init__(self, queryset: QuerySet[Any, Any]) -> None:
        self.queryset = queryset

    def order_by(self, *fields: str) -> Merged:
        return Merged(self.queryset.order_by(*fields))

    def filter(self, *args: Any, **kwargs: Any) -> Merged:
        return Merged(self.queryset.filter(*args, **kwargs))

    def _descending(self) -> bool:
        ordering = [str(field) for field in self.queryset.query.order_by]
        if ordering not in (["id"], ["-id"], ["pk"], ["-pk"]):
            raise ValueError(f"a merged queryset is ordered by id alone, not {ordering}")
        return ordering[0].startswith("-")

    def __getitem__(self, window: slice) -> list[Any]:
        descending = self._descending()
        rows: list[Any] = []
        for alias in aliases():
            with using(alias):
                rows += list(self.queryset[:window.stop])
        rows.sort(key=lambda row: row.pk, reverse=descending)
        return rows[window]


def across(combine: Callable[[list[_R]], _R]) -> Callable[[Callable[..., _R]], Callable[..., _R]]:
    """Decorator: with shards, the function runs on every shard and `combine` makes one
    answer of theirs (one shard: the function as it is)."""

    def decorate(func: Callable[..., _R]) -> Callable[..., _R]:
        @functools.wraps(func)
        def on_every_shard(*args: Any, **kwargs: Any) -> _R:
            if not sharded() or _across.get():  # within another: on the shard it is on
                return func(*args, **kwargs)
            answers = []
            token = _across.set(True)
            try:
                for alias in aliases():
                    with using(alias):
                        answers.append(func(*args, **kwargs))
            finally:
                _across.reset(token)
            return combine(answers)

        return on_every_shard

    return decorate


def added(answers: list[Any]) -> Any:
    """Counts by key (a Counter or a dict of numbers) added up; a Counter."""
    total: Counter[Any] = Counter()
    for answer in answers:
        total.update(answer)
    return total


def latest(answers: list[Any]) -> Any:
    """Per key the largest of the numbers (an age, a time): a dict."""
    most: dict[Any, Any] = {}
    for answer in answers:
        for key, value in answer.items():
            most[key] = value if key not in most else max(most[key], value)
    return most


# --- placement ----------------------------------------------------------------------------

def bucket_of(lambda_id: int, key: str) -> int:
    """The bucket of an idempotency key (of one lambda): stable across processes."""
    return zlib.crc32(f"{lambda_id}\0{key}".encode()) % BUCKETS


def key_alias(lambda_id: int, key: str) -> str:
    """The shard that holds the task of an idempotency key, whatever process asks."""
    names = aliases()
    return names[bucket_of(lambda_id, key) % len(names)]


def in_transaction() -> str | None:
    """The shard the caller holds an open transaction on (the first, by slot), if any."""
    return next((alias for alias in aliases() if connections[alias].in_atomic_block), None)


class _Turns:
    """Round-robin over the shards, passing over those marked down a moment ago."""

    def __init__(self) -> None:
        self._next = itertools.count()
        self._down: dict[str, float] = {}
        self._lock = threading.Lock()

    def pick(self) -> str:
        names = aliases()
        start = next(self._next)
        now = time.monotonic()
        for step in range(len(names)):
            alias = names[(start + step) % len(names)]
            if self._down.get(alias, 0.0) <= now:
                return alias
        return names[start % len(names)]  # all down: try one anyway, its error tells

    def mark_down(self, alias: str) -> None:
        with self._lock:
            self._down[alias] = time.monotonic() + DOWN_S


turns = _Turns()


def home_of(parents: Iterable[int]) -> str | None:
    """The one shard `parents` live on (None: no parents); ShardError where they live on
    more than one (a dependency across shards is not kept, for now)."""
    homes = {alias_of(parent) for parent in parents}
    if len(homes) > 1:
        raise ShardError("Parent tasks live on different shards "
                         f"({', '.join(sorted(homes))}); a task waits only for parents on "
                         "one shard.")
    return homes.pop() if homes else None


def place(*, lambda_id: int, key: str | None, parents: Iterable[int] = ()) -> str:
    """The shard a new task goes to: its parents' (a chain stays on one shard), its key's
    bucket's (an idempotency or debounce key: one row per key, whatever process schedules
    it), the shard of the caller's open transaction (the task commits or rolls back with the
    caller's rows), else the next healthy one in turn. ShardError where its parents live on
    more than one shard."""
    names = aliases()
    if len(names) == 1:
        return names[0]
    if (home := home_of(parents)) is not None:
        return home
    if key is not None:
        return key_alias(lambda_id, key)
    return in_transaction() or turns.pick()


# --- routing ------------------------------------------------------------------------------

class Router:
    """Django database router: the shard models' queries go to the shard the store works on
    (or the one an instance was read from), every other model's to the control database.
    Every database gets the whole schema (a shard's control tables hold the mirrored rows)."""

    def _alias(self, model: type[Model], hints: dict[str, Any]) -> str | None:
        if model._meta.label_lower not in _SHARD_LABELS:
            return None
        instance = hints.get("instance")
        if instance is not None and instance._state.db is not None:
            return instance._state.db
        return current()

    def db_for_read(self, model: type[Model], **hints: Any) -> str | None:
        return self._alias(model, hints)

    def db_for_write(self, model: type[Model], **hints: Any) -> str | None:
        return self._alias(model, hints)

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool | None:
        return True


# --- preparing a shard --------------------------------------------------------------------

def prepare(alias: str) -> None:
    """Start the shard's id sequences (tasks, groups) at its slot's first id where they are
    below it (idempotent: a sequence past it is left alone), then mirror the control rows into
    it. Nothing for the control database (slot 0 or no shard at all)."""
    names = aliases()
    if alias not in names or alias == CONTROL:
        return
    floor = first_id(names.index(alias))
    with connections[alias].cursor() as cursor:
        for model_name in ("taskentity", "taskgroup"):
            table = apps.get_model("tasks_core", model_name)._meta.db_table
            cursor.execute("SELECT pg_get_serial_sequence(%s, 'id')", [table])
            (sequence,) = cursor.fetchone()
            cursor.execute(f"SELECT last_value FROM {sequence}")  # noqa: S608 (its own name)
            if cursor.fetchone()[0] < floor:
                cursor.execute("SELECT setval(%s, %s)", [sequence, floor])
    mirror(alias)


def others() -> list[str]:
    """The shards other than the control database (those that keep mirrored rows)."""
    return [alias for alias in aliases() if alias != CONTROL]


def mirror(alias: str | None = None) -> None:
    """Copy the control rows every shard needs (teams, lambdas with their gates, collections
    with theirs) into shard `alias`, or into every shard but the control database."""
    targets = [alias] if alias is not None else others()
    if not targets:
        return
    for model_name in MIRRORED:
        model = apps.get_model("tasks_core", model_name)
        rows = list(model.objects.using(CONTROL).all())
        mirror_rows(rows, targets)
        if model_name in _DELETED:  # rows gone from control go from the copies too
            for target in targets:
                with _passed_over(target, f"delete {model._meta.model_name} rows from"):
                    model.objects.using(target).exclude(pk__in=[row.pk for row in rows]) \
                        .delete()


@contextlib.contextmanager
def _passed_over(target: str, doing: str) -> Iterator[None]:
    """A copy's write to shard `target` that fails is logged and passed over (its next
    `migrate`, or lambda sync, copies again); except where the caller holds an open
    transaction on that shard (a batch that schedules on it): the error goes to the caller,
    whose transaction there cannot commit. Passed over, it left that transaction marked for
    rollback, which Django does silently at its end: the batch returned tasks that were never
    stored there (chaos: acknowledged schedules vanished)."""
    try:
        yield
    except DatabaseError as exc:
        if connections[target].in_atomic_block:
            raise
        logger.warning("could not %s shard %s: %s", doing, target, exc,
                       extra={"action": "shard_mirror_failed", "shard": target})


def mirror_rows(rows: list[Any], targets: list[str] | None = None) -> None:
    """Write control rows (of one model, with their ids) into shards `targets` (default: every
    shard but the control database), inserting or updating each; a shard that cannot be
    reached is passed over (_passed_over)."""
    if not rows:
        return
    model = type(rows[0])
    fields = [f.name for f in model._meta.concrete_fields if not f.primary_key]
    for target in others() if targets is None else targets:
        if target == CONTROL:
            continue
        with _passed_over(target, f"copy {model._meta.model_name} rows into"):
            pool_answers(target)  # a shard that is down holds the caller POOL_WAIT_S at most
            # Copies: bulk_create binds what it saves to its database, the caller's stay.
            model.objects.using(target).bulk_create(
                [copy.copy(row) for row in rows], update_conflicts=True, unique_fields=["id"],
                update_fields=fields)
