"""TaskRequest, the whole of "schedule this", and schedule(), schedule_many(), cancel(), chain():
validate a request once, then call the store in one transaction.

Scheduling writes to the application's own database, so a `schedule()` inside the caller's
`transaction.atomic()` commits or rolls back with the caller's rows.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
from collections.abc import Collection as Many
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, OperationalError, transaction
from django.utils import dateparse, timezone

from tasks_core import (
    debounce,
    directory,
    lambda_names,
    limits,
    shards,
    store,
    tracing,
    wakeup,
)
from tasks_core.conf import atf_settings
from tasks_core.exceptions import InvalidTask, LambdaNotFound, TaskNotFound
from tasks_core.gating import GateState
from tasks_core.lambda_options import BY_NAME
from tasks_core.models import Collection, Lambda, TaskEntity

logger = logging.getLogger(__name__)

@dataclass(frozen=True, slots=True)
class TaskRequest:
    """The whole of "schedule this": one task's lambda, payload and options, as asked for.

    Built with typed keywords (`atf.schedule`, `atf.call`), or from JSON-shaped data with
    `from_json` (the REST API, `schedule_many`'s mappings); `validate` checks it, once, into
    the store's `NewTask`. Seconds are plain numbers: `delay` from now, `timeout` for one
    attempt.
    """

    lambda_name: str
    payload: Any = None
    _: KW_ONLY
    collection: str | None = None  #: None: "default"
    priority: str | None = None  #: None: ATF_DEFAULT_PRIORITY
    run_at: datetime | None = None  #: when it is due; not with `delay`
    delay: float | None = None  #: seconds from now until it is due; not with `run_at`
    idempotency_key: str | None = None  #: a second request with it returns the first task
    max_attempts: int | None = None  #: None: the lambda's
    timeout: float | None = None  #: seconds one attempt may run; 0: no limit; None: lambda's
    after: Sequence[int] = ()  #: parent task ids: it runs once all of them succeeded
    # Flow control (tasks_core.debounce, tasks_core.flow):
    limit_key: str | None = None  #: what the lambda's key_concurrency and key_rate count it under
    debounce: float | None = None  #: seconds: due then; a later schedule of its key replaces it
    debounce_key: str | None = None  #: the key a debounced task is replaced by

    @classmethod
    def from_json(cls, data: Any, *, now: datetime | None = None,
                  teams: Many[int] | None = None) -> TaskRequest:
        """The request a JSON object names: "lambda", "payload" and the options by their names
        here; null is the same as leaving an option out. `teams`: as `validate` takes them.

        InvalidTask names every problem at once: what cannot be read (not an object, an
        unknown field, no lambda, a run_at that is not ISO 8601, an `after` that is not a list
        of ids) and what `validate` says of the rest, except of `after` (its answer would tell
        another team's task ids from unknown ones; the caller checks parents in its scope).
        """
        if not isinstance(data, Mapping):
            raise InvalidTask({"non_field_errors": [
                f"Invalid data. Expected a dictionary, but got {type(data).__name__}."]})
        errors: dict[str, list[str]] = {}
        fields: dict[str, Any] = {}
        for key, value in data.items():
            name = _JSON_FIELDS.get(key)
            if name is None:
                if len(errors) < _MOST_UNKNOWN:
                    errors[str(key)[:100]] = ["Unknown field."]
            elif value is not None:
                fields[name] = value.strip() if type(value) is str and name in _TEXT else value
        if "lambda_name" not in fields:
            errors["lambda"] = ["This field is required."]
        elif not isinstance(fields["lambda_name"], str):  # a name, before any scope check
            errors["lambda"] = ["Not a valid string."]
            del fields["lambda_name"]
        if isinstance(run_at := fields.get("run_at"), str):
            if (parsed := parse_datetime(run_at)) is None:
                errors["run_at"] = [RUN_AT_FORMAT]
                del fields["run_at"]
            else:
                fields["run_at"] = parsed
        if "after" in fields:
            if problem := _after_error(fields["after"]):
                errors["after"] = [problem]
                del fields["after"]
            else:
                fields["after"] = tuple(fields["after"])
        if not errors:
            return cls(**fields)
        try:
            validate(cls(**{"lambda_name": "", **fields}), now=now or timezone.now(),
                     teams=teams)
        except InvalidTask as exc:
            errors = {**{name: msgs for name, msgs in exc.errors.items()
                         if name not in errors and name != "after"}, **errors}
        raise InvalidTask(errors)


#: TaskRequest's fields by their names in JSON.
_JSON_FIELDS = {("lambda" if f.name == "lambda_name" else f.name): f.name
                for f in dataclasses.fields(TaskRequest)}
#: The text fields, whose surrounding white space is dropped.
_TEXT = frozenset({"lambda_name", "collection", "priority", "idempotency_key", "limit_key",
                   "debounce_key"})
#: Unknown fields named in one error.
_MOST_UNKNOWN = 20
#: The times a request may give, as its messages show them.
ISO_8601_FORMAT = "YYYY-MM-DDThh:mm[:ss[.uuuuuu]][+HH:MM|-HH:MM|Z]"
RUN_AT_FORMAT = f"run_at must be ISO 8601 ({ISO_8601_FORMAT})."


def _after_error(after: Any) -> str | None:
    """What is wrong with `after` as a list of parent task ids, before any is looked up."""
    if not isinstance(after, list | tuple) or not all(type(pk) is int for pk in after):
        return "after must be a list of task ids."
    if len(after) > limits.MAX_PARENTS:
        return f"A task waits for at most {limits.MAX_PARENTS} parents."
    return None


def json_field_names() -> list[str]:
    """A task request's field names in JSON, in order."""
    return list(_JSON_FIELDS)


def parse_datetime(text: str) -> datetime | None:
    """An ISO 8601 time; without an offset, in the current time zone (UTC by default)."""
    try:
        parsed = dateparse.parse_datetime(text)
    except ValueError:
        return None
    if parsed is not None and timezone.is_naive(parsed):
        parsed = timezone.make_aware(parsed)
    return parsed


#: Why a payload with text the database cannot store is refused.
BAD_TEXT = "Strings may not contain NUL (\\u0000) characters or lone surrogates."


def shape_error(value: Any, depth_limit: int) -> str | None:
    """What makes a payload unstorable before it is even serialised: objects and arrays nested
    deeper than `depth_limit`, or text the database cannot hold. Found without recursion."""
    stack = [(value, 1)]
    children: Iterable[Any]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if limits.bad_text(item):
                return BAD_TEXT
            continue
        if isinstance(item, dict):
            if any(isinstance(key, str) and limits.bad_text(key) for key in item):
                return BAD_TEXT
            children = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth > depth_limit:
            return "Payload is nested too deeply."
        stack.extend((child, depth + 1) for child in children)
    return None


def _payload_errors(payload: Any) -> list[str]:
    # Checked first and without recursion: storing a payload nested near Python's recursion
    # limit would fail deep inside the database driver instead of here, and PostgreSQL
    # refuses a NUL in JSON text only when the row is written.
    if problem := shape_error(payload, atf_settings.max_payload_depth):
        return [problem]
    try:
        text = json.dumps(payload, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        return [f"Payload must be JSON (objects, arrays, strings, numbers, booleans, null): {exc}."]
    except RecursionError:
        return ["Payload is nested too deeply."]
    size = len(text.encode())
    if size > atf_settings.max_payload_bytes:
        return [f"Payload is {size} bytes; the limit is {atf_settings.max_payload_bytes}."]
    return []


def validate(request: TaskRequest, *, now: datetime,
             teams: Many[int] | None = None) -> store.NewTask:
    """Check a task request, the one place that does; return the task to insert, or raise
    InvalidTask with every error by field (its name in JSON: "lambda", "payload", ...).

    `teams`: the ids of the caller's teams, whose lambdas it may schedule; another team's
    lambda gets the answer of an unknown one, so that its name is not confirmed. None: any.
    """
    errors: dict[str, list[str]] = {}
    info = None
    lambda_name = request.lambda_name
    if isinstance(lambda_name, str) and (problems := limits.text_errors(lambda_name)):
        errors["lambda"] = problems
    elif problem := lambda_names.problem(lambda_name):
        errors["lambda"] = [problem]
    elif (info := _lambda_info(lambda_name, teams)) is None:
        errors["lambda"] = [unknown_lambda(lambda_name)]
    payload = {} if request.payload is None else request.payload
    if problems := _payload_errors(payload):
        errors["payload"] = problems
    collection = "default" if request.collection in (None, "") else request.collection
    if problem := limits.collection_name_error(collection):
        errors["collection"] = [problem]
    priority = request.priority or atf_settings.default_priority
    if priority not in atf_settings.priorities:
        errors["priority"] = [f"Unknown priority {_shown(priority)}; use one of "
                              f"{', '.join(atf_settings.priorities)}."]
    run_at, time_errors = _due_at(request, now)
    errors.update(time_errors)
    idempotency_key, max_attempts, timeout = (request.idempotency_key, request.max_attempts,
                                              request.timeout)
    if problems := idempotency_key_errors(idempotency_key):
        errors["idempotency_key"] = problems
    # A task's own max_attempts and timeout have the bounds of the lambda's options.
    attempts_option, timeout_option = BY_NAME["max_attempts"], BY_NAME["timeout"]
    if max_attempts is not None and (
        isinstance(max_attempts, bool) or not isinstance(max_attempts, int)
        or not attempts_option.least <= max_attempts <= attempts_option.most
    ):
        errors["max_attempts"] = [
            f"max_attempts must be a whole number from {attempts_option.least:g} to "
            f"{attempts_option.most:g}."
        ]
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float)
                                or not timeout_option.least <= timeout <= timeout_option.most):
        errors["timeout"] = [f"timeout must be a number of seconds from 0 (no limit) to "
                             f"{timeout_option.most:.0f}."]
    parents = tuple(request.after) if isinstance(request.after, list | tuple) else ()
    if problem := _after_error(request.after):
        errors["after"] = [problem]
    elif len(set(parents)) < len(parents):
        errors["after"] = ["Each parent task may be named only once."]
    elif parents:
        errors.update(_parent_errors(parents))
    errors.update(debounce.check(
        limit_key=request.limit_key, debounce=request.debounce,
        debounce_key=request.debounce_key, run_at=request.run_at, delay=request.delay,
        idempotency_key=idempotency_key, after=request.after))
    if errors or info is None:
        raise InvalidTask(errors)
    if request.debounce is not None:
        run_at = now + timedelta(seconds=request.debounce)
    return store.NewTask(
        lambda_id=info.id,
        collection=collection,
        priority=priority,
        payload=payload,
        run_at=run_at or now,
        max_attempts=max_attempts or info.max_attempts,
        idempotency_key=idempotency_key,
        timeout_s=timeout,
        parents=parents,
        limit_key=request.limit_key,
        debounce_key=request.debounce_key,
    )


def idempotency_key_errors(key: Any) -> list[str]:
    """What is wrong with an idempotency key (a task's or a group's); None is none."""
    key_chars = limits.idempotency_key_chars()
    if key is None:
        return []
    if not isinstance(key, str) or not key or len(key) > key_chars:
        return [f"Idempotency key must be a non-empty string of at most {key_chars} characters."]
    return limits.text_errors(key)


def _parent_errors(parents: Sequence[int]) -> dict[str, list[str]]:
    """The error of parents that do not exist, or that live on more than one shard."""
    try:
        home = shards.home_of(parents)
    except shards.ShardError as exc:
        return {"after": [str(exc)]}
    with shards.using(home or shards.current()):
        known = set(TaskEntity.objects.filter(pk__in=parents).values_list("pk", flat=True))
    if missing := sorted(set(parents) - known):
        return {"after": [f"Unknown parent task(s): {', '.join(map(str, missing))}."]}
    return {}


def _lambda_info(name: Any, teams: Many[int] | None) -> directory.LambdaInfo | None:
    """The lambda `name` names, if known and (with `teams`) of one of those teams."""
    try:
        info = directory.by_name(str(name))
    except LambdaNotFound:
        return None
    if teams is not None and info.team_id not in teams:
        logger.info("refused to schedule %s outside the actor's teams", name,
                    extra={"action": "schedule_refused", "lambda": name})
        return None
    return info


def unknown_lambda(name: Any) -> str:
    """The error of a lambda name that is unknown, or another team's."""
    return f"Unknown lambda {_shown(name)}."


def _due_at(request: TaskRequest, now: datetime) -> tuple[datetime | None, dict[str, list[str]]]:
    """When the task is due, in UTC (None: now), and the errors of run_at and delay: either
    one, within the delay's bound, leading to a time within limits.EARLIEST_TIME and
    limits.LATEST_TIME."""
    run_at, delay = request.run_at, request.delay
    if run_at is not None and delay is not None:
        return None, {"run_at": ["Give run_at or delay, not both."]}
    if delay is not None:
        field = "delay"
        if isinstance(delay, bool) or not isinstance(delay, int | float) \
                or not 0 <= delay <= limits.MAX_DELAY_S:
            return None, {field: [
                f"Delay must be a number of seconds from 0 to {limits.MAX_DELAY_S:.0f}."]}
        try:
            run_at = now + timedelta(seconds=delay)
        except OverflowError:
            return None, {field: [limits.TIME_OUT_OF_RANGE]}
    elif run_at is None:
        return None, {}
    else:
        field = "run_at"
        if not isinstance(run_at, datetime) or timezone.is_naive(run_at):
            return None, {field: ["run_at must be a datetime with a time zone."]}
    try:
        return limits.in_utc(run_at), {}
    except ValueError as exc:
        return None, {field: [str(exc)]}


def _shown(value: Any) -> str:
    """A value an error names, cut short: it may be anything a caller sent."""
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else text[:_SHOWN_CHARS] + "…"


#: Characters of a bad value that an error shows.
_SHOWN_CHARS = 100


def wake_on_commit(entities: Sequence[TaskEntity], now: datetime) -> None:
    """Wake the consumers once the caller commits, if a task is due now (the wake-ups of a
    transaction's many tasks become one publish: tasks_core.wakeup)."""
    if any(entity.status == "new" and entity.run_at <= now for entity in entities):
        shards.on_commit(wakeup.notify)


def create(tasks: Sequence[store.NewTask], now: datetime) -> list[TaskEntity]:
    """store.create() on the shard the store works on, making the Collection rows the tasks
    name where none is known yet (with shards: in the control database and its copies in every
    shard, first, so that their gates apply on every shard)."""
    missing = directory.unknown_collections((task.lambda_id, task.collection) for task in tasks)
    if missing and shards.sharded():
        shards.mirror_rows(_control_collections(missing))
        directory.remember_collections(missing)
        missing = []
    if tracing.ENABLED:
        with shards.atomic():  # a task and the trace context it carries, together
            entities = store.create(tasks, now=now, collections=missing)
            tracing.record_scheduled(entities)
    else:
        entities = store.create(tasks, now=now, collections=missing)
    directory.remember_collections(missing)
    return entities


def _control_collections(pairs: Sequence[tuple[int, str]]) -> list[Collection]:
    """The Collection rows of (lambda id, name) pairs in the control database, made where
    missing."""
    Collection.objects.bulk_create([Collection(lambda_ref_id=lambda_id, name=name)
                                    for lambda_id, name in pairs], ignore_conflicts=True)
    wanted = set(pairs)
    return [row for row in Collection.objects.filter(
        lambda_ref_id__in={lambda_id for lambda_id, _name in pairs},
        name__in={name for _lambda_id, name in pairs}) if (row.lambda_ref_id, row.name) in wanted]


def _existing(task: store.NewTask) -> TaskEntity | None:
    if task.idempotency_key is None:
        return None
    return TaskEntity.objects.filter(
        lambda_ref_id=task.lambda_id, idempotency_key=task.idempotency_key
    ).first()


def schedule(request: TaskRequest, *, now: datetime | None = None,
             teams: Many[int] | None = None) -> tuple[TaskEntity, bool]:
    """Schedule one task; return it and whether it was created (False: its idempotency key
    named an earlier task, which is returned instead). `teams`: as `validate` takes them."""
    now = now or timezone.now()
    task = validate(request, now=now, teams=teams)
    alias = _place(task)
    in_turn = _in_turn(task)
    try:
        with shards.using(alias):
            if in_turn:  # another shard can take it: wait no longer for this one
                shards.pool_answers(alias)
            return _schedule_here(task, now)
    except OperationalError:
        # A shard that cannot be reached costs only the tasks that must go to it: one that
        # was placed in turn goes to the next shard instead.
        if not in_turn:
            raise
        shards.turns.mark_down(alias)
        logger.warning("shard %s unavailable: a task went to another", alias,
                       extra={"action": "shard_passed_over", "shard": alias})
        with shards.using(shards.turns.pick()):
            return _schedule_here(task, now)


def _in_turn(task: store.NewTask) -> bool:
    """Whether the task's shard was only its turn (no key, parents or caller's transaction
    decided it), so that another shard may take it."""
    return (shards.sharded() and task.idempotency_key is None and task.debounce_key is None
            and not task.parents and shards.in_transaction() is None)


def _place(task: store.NewTask) -> str:
    key = task.debounce_key if task.idempotency_key is None else task.idempotency_key
    return shards.place(lambda_id=task.lambda_id, key=key, parents=task.parents)


def _schedule_here(task: store.NewTask, now: datetime) -> tuple[TaskEntity, bool]:
    """schedule()'s work on the shard the store works on."""
    if task.debounce_key is not None:
        return debounce.schedule(task, now=now, create=create)
    if task.idempotency_key is None:
        # store.create() makes its own transaction where it needs one (or joins the caller's).
        entity = create([task], now)[0]
        wake_on_commit([entity], now)
        return entity, True
    with shards.atomic():
        if (existing := _existing(task)) is not None:
            return existing, False
        try:
            with shards.atomic():  # a savepoint, only where a key may collide
                entity = create([task], now)[0]
        except IntegrityError:
            # Another caller inserted the same idempotency key first: return its task.
            if (existing := _existing(task)) is None:
                raise
            return existing, False
        wake_on_commit([entity], now)
    return entity, True


def schedule_many(requests: Sequence[TaskRequest | Mapping[str, Any]], *,
                  now: datetime | None = None,
                  teams: Many[int] | None = None) -> list[TaskEntity]:
    """Schedule many tasks in one transaction: all or none.

    Each is a TaskRequest, or a mapping of "lambda", "payload" and options as JSON names them
    (TaskRequest.from_json). Raises InvalidTask whose errors are keyed "tasks[i].field" (see
    requests_from_json). `teams`: as `validate` takes them.
    """
    now = now or timezone.now()
    tasks: list[store.NewTask] = []
    errors: dict[str, list[str]] = {}
    for index, request in enumerate(requests_from_json(requests, now=now, teams=teams)):
        try:
            tasks.append(validate(request, now=now, teams=teams))
        except InvalidTask as exc:
            errors.update(_item_errors(index, exc))
    if errors:
        raise InvalidTask(errors)
    _check_new_collections({(t.lambda_id, t.collection) for t in tasks})
    # Unkeyed tasks without parents go together, to one shard: a batch touches few shards.
    together = shards.place(lambda_id=tasks[0].lambda_id, key=None) \
        if tasks else shards.current()
    homes = [_place(task) if task.idempotency_key or task.debounce_key or task.parents
             else together for task in tasks]
    entities: list[TaskEntity | None] = [None] * len(tasks)
    # All or none: each shard's part in a transaction of its own, committed together at the
    # end (a batch on one shard, the usual case, is one transaction).
    with contextlib.ExitStack() as stack:
        for alias in dict.fromkeys(homes):
            stack.enter_context(transaction.atomic(using=alias))
        for alias in dict.fromkeys(homes):
            part = [index for index, home in enumerate(homes) if home == alias]
            with shards.using(alias):
                for index, entity in zip(part, _schedule_part([tasks[i] for i in part], now),
                                         strict=True):
                    entities[index] = entity
    return [entity for entity in entities if entity is not None]


def _schedule_part(tasks: Sequence[store.NewTask], now: datetime) -> list[TaskEntity]:
    """schedule_many()'s tasks of one shard, on it, inside its transaction."""
    results: list[TaskEntity | None] = [
        debounce.schedule(task, now=now, create=create)[0] if task.debounce_key is not None
        else _existing(task) for task in tasks]
    fresh = [task for task, found in zip(tasks, results, strict=True) if found is None]
    created = iter(create(fresh, now))
    entities = [found or next(created) for found in results]
    wake_on_commit(entities, now)
    return entities


def requests_from_json(items: Sequence[Any], *, now: datetime | None = None,
                       teams: Many[int] | None = None) -> list[TaskRequest]:
    """A batch's requests (TaskRequest.from_json of each item; a TaskRequest stays as it is).

    InvalidTask keys its errors "tasks[i].field"; a batch over ATF_MAX_BATCH_SIZE or
    ATF_MAX_BATCH_PARENTS, or one that repeats an idempotency key for one lambda, is refused as
    a whole.
    """
    limits.check_batch(items)
    now = now or timezone.now()
    requests: list[TaskRequest] = []
    errors: dict[str, list[str]] = {}
    for index, item in enumerate(items):
        try:
            requests.append(item if isinstance(item, TaskRequest)
                            else TaskRequest.from_json(item, now=now, teams=teams))
        except InvalidTask as exc:
            errors.update(_item_errors(index, exc))
    if errors:
        raise InvalidTask(errors)
    seen: dict[tuple[str, str], int] = {}
    for index, request in enumerate(requests):
        if request.idempotency_key is None:
            continue
        key = (request.lambda_name, request.idempotency_key)
        if key in seen:
            errors[f"tasks[{index}].idempotency_key"] = [
                f"Repeats the idempotency key of tasks[{seen[key]}]."]
        seen.setdefault(key, index)
    if errors:
        raise InvalidTask(errors)
    return requests


def _item_errors(index: int, exc: InvalidTask) -> dict[str, list[str]]:
    return {f"tasks[{index}].{name}": msgs for name, msgs in exc.errors.items()}


def _check_new_collections(pairs: set[tuple[int, str]]) -> None:
    """InvalidTask when a batch would create more than ATF_MAX_NEW_COLLECTIONS collections."""
    limit = atf_settings.max_new_collections
    if len(pairs) <= limit:
        return
    lambda_ids = {lambda_id for lambda_id, _name in pairs}
    known = set(Collection.objects.filter(lambda_ref_id__in=lambda_ids)
                .values_list("lambda_ref_id", "name"))
    if len(pairs - known) > limit:
        raise InvalidTask({"tasks": [f"At most {limit} new collections per batch; this one "
                                     f"names {len(pairs - known)}."]})


def cancel(task_id: int, *, now: datetime | None = None) -> TaskEntity:
    """Cancel a task, or ask the worker running it to stop it (store.cancel); InvalidTransition
    if it finished."""
    with shards.on(task_id):
        if not TaskEntity.objects.filter(pk=task_id).exists():
            raise TaskNotFound(f"no task {task_id}")
        store.cancel(task_id, now=now or timezone.now())
        return TaskEntity.objects.get(pk=task_id)


def set_gate(lambda_name: str, state: str, *, collection: str | None = None,
             until: datetime | None = None) -> Lambda | Collection:
    """Open, pause or drop a lambda (or one of its collections); return the gated row.

    `until` (only with a closed gate, within limits.EARLIEST_TIME and LATEST_TIME) reopens it
    by itself. The consumer sees the change on its next poll.
    """
    errors: dict[str, list[str]] = {}
    if state not in GateState.__members__.values():
        errors["state"] = [f"Unknown gate state {state!r}; use open, paused or dropped."]
    if until is not None and state == GateState.OPEN:
        errors["until"] = ["until goes with a paused or dropped gate."]
    elif until is not None:
        try:
            until = limits.in_utc(timezone.make_aware(until) if timezone.is_naive(until)
                                  else until)
        except ValueError as exc:
            errors["until"] = [str(exc)]
    if collection is not None and (problem := limits.collection_name_error(collection)):
        errors["collection"] = [problem]
    if errors:
        raise InvalidTask(errors)
    info = directory.by_name(lambda_name)
    if collection is None:
        row: Lambda | Collection = Lambda.objects.get(pk=info.id)
    else:
        row, _created = Collection.objects.get_or_create(lambda_ref_id=info.id, name=collection)
    row.gate = GateState(state)
    row.gate_until = until
    row.save(update_fields=["gate", "gate_until"])
    shards.mirror_rows([row])  # every shard's claims read the gate from their own copy
    logger.info("gate of %s%s set to %s%s", lambda_name, f"/{collection}" if collection else "",
                state, f" until {until.isoformat()}" if until else "",
                extra={"action": "gate_set", "lambda": lambda_name, "collection": collection})
    return row
