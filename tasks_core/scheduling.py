"""schedule(), schedule_many(), cancel(), chain(): validate, then call the store in one transaction.

Scheduling writes to the application's own database, so a `schedule()` inside the caller's
`transaction.atomic()` commits or rolls back with the caller's rows.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from tasks_core import directory, limits, store, wakeup
from tasks_core.exceptions import InvalidTask, LambdaNotFound, TaskNotFound
from tasks_core.gating import GateState
from tasks_core.models import Collection, Lambda, TaskEntity

logger = logging.getLogger(__name__)

#: The options schedule() takes besides the lambda and its payload.
OPTIONS = ("collection", "priority", "run_at", "delay", "idempotency_key", "max_attempts",
           "timeout", "after")


@dataclass(frozen=True, kw_only=True)
class Call:
    """One step of a chain: a lambda, its payload and schedule() options (see atf.call)."""

    lambda_name: str
    payload: Any = None
    options: Mapping[str, Any] = field(default_factory=dict)


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
    if problem := shape_error(payload, settings.ATF_MAX_PAYLOAD_DEPTH):
        return [problem]
    try:
        text = json.dumps(payload, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        return [f"Payload must be JSON (objects, arrays, strings, numbers, booleans, null): {exc}."]
    except RecursionError:
        return ["Payload is nested too deeply."]
    size = len(text.encode())
    if size > settings.ATF_MAX_PAYLOAD_BYTES:
        return [f"Payload is {size} bytes; the limit is {settings.ATF_MAX_PAYLOAD_BYTES}."]
    return []


def validate(lambda_name: Any, payload: Any = None, *, collection: Any = None,
             priority: Any = None, run_at: Any = None, delay: Any = None,
             idempotency_key: Any = None, max_attempts: Any = None, timeout: Any = None,
             after: Sequence[int] | None = None, now: datetime) -> store.NewTask:
    """Check one task's fields; return the task to insert, or raise InvalidTask with every error."""
    errors: dict[str, list[str]] = {}
    info = None
    try:
        info = directory.by_name(str(lambda_name))
    except LambdaNotFound:
        errors["lambda"] = [f"Unknown lambda {lambda_name!r}."]
    if payload is None:
        payload = {}
    if problems := _payload_errors(payload):
        errors["payload"] = problems
    collection = "default" if collection in (None, "") else collection
    if problem := limits.collection_name_error(collection):
        errors["collection"] = [problem]
    priority = priority or settings.ATF_DEFAULT_PRIORITY
    if priority not in settings.ATF_PRIORITIES:
        errors["priority"] = [
            f"Unknown priority {priority!r}; use one of {', '.join(settings.ATF_PRIORITIES)}."
        ]
    if run_at is not None and delay is not None:
        errors["run_at"] = ["Give run_at or delay, not both."]
    elif delay is not None:
        if isinstance(delay, bool) or not isinstance(delay, int | float) \
                or not 0 <= delay <= limits.MAX_DELAY_S:
            errors["delay"] = [
                f"Delay must be a number of seconds from 0 to {limits.MAX_DELAY_S:.0f}."
            ]
        else:
            run_at = now + timedelta(seconds=delay)
    elif run_at is not None and (not isinstance(run_at, datetime) or timezone.is_naive(run_at)):
        errors["run_at"] = ["run_at must be a datetime with a time zone."]
    key_chars = limits.idempotency_key_chars()
    if idempotency_key is not None and (
        not isinstance(idempotency_key, str) or not idempotency_key
        or len(idempotency_key) > key_chars
    ):
        errors["idempotency_key"] = [
            f"Idempotency key must be a non-empty string of at most {key_chars} characters."
        ]
    if max_attempts is not None and (
        isinstance(max_attempts, bool) or not isinstance(max_attempts, int)
        or not 1 <= max_attempts <= limits.MAX_ATTEMPTS
    ):
        errors["max_attempts"] = [
            f"max_attempts must be a whole number from 1 to {limits.MAX_ATTEMPTS}."
        ]
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float)
                                or not 0 <= timeout <= limits.MAX_DELAY_S):
        errors["timeout"] = [f"timeout must be a number of seconds from 0 (no limit) to "
                             f"{limits.MAX_DELAY_S:.0f}."]
    parents = tuple(after or ())
    if len(parents) > limits.MAX_PARENTS:
        errors["after"] = [f"A task waits for at most {limits.MAX_PARENTS} parents."]
    elif len(set(parents)) < len(parents):
        errors["after"] = ["Each parent task may be named only once."]
    elif parents:
        known = set(TaskEntity.objects.filter(pk__in=parents).values_list("pk", flat=True))
        if missing := sorted(set(parents) - known):
            errors["after"] = [f"Unknown parent task(s): {', '.join(map(str, missing))}."]
    if errors or info is None:
        raise InvalidTask(errors)
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
    )


def _wake_on_commit(entities: Sequence[TaskEntity], now: datetime) -> None:
    """Wake the consumers once the caller commits, if a task is due now (the wake-ups of a
    transaction's many tasks become one publish: tasks_core.wakeup)."""
    if any(entity.status == "new" and entity.run_at <= now for entity in entities):
        transaction.on_commit(wakeup.notify)


def _create(tasks: Sequence[store.NewTask], now: datetime) -> list[TaskEntity]:
    """store.create(), making the Collection rows the tasks name where none is known yet."""
    missing = directory.unknown_collections((task.lambda_id, task.collection) for task in tasks)
    entities = store.create(tasks, now=now, collections=missing)
    directory.remember_collections(missing)
    return entities


def _existing(task: store.NewTask) -> TaskEntity | None:
    if task.idempotency_key is None:
        return None
    return TaskEntity.objects.filter(
        lambda_ref_id=task.lambda_id, idempotency_key=task.idempotency_key
    ).first()


def schedule(lambda_name: str, payload: Any = None, *, now: datetime | None = None,
             **options: Any) -> tuple[TaskEntity, bool]:
    """Schedule one task; return it and whether it was created (False: its idempotency key
    named an earlier task, which is returned instead)."""
    now = now or timezone.now()
    task = validate(lambda_name, payload, now=now, **options)
    if task.idempotency_key is None:
        # store.create() makes its own transaction where it needs one (or joins the caller's).
        entity = _create([task], now)[0]
        _wake_on_commit([entity], now)
        return entity, True
    with transaction.atomic():
        if (existing := _existing(task)) is not None:
            return existing, False
        try:
            with transaction.atomic():  # a savepoint, only where a key may collide
                entity = _create([task], now)[0]
        except IntegrityError:
            # Another caller inserted the same idempotency key first: return its task.
            if (existing := _existing(task)) is None:
                raise
            return existing, False
        _wake_on_commit([entity], now)
    return entity, True


def schedule_many(calls: Sequence[Mapping[str, Any]], *,
                  now: datetime | None = None) -> list[TaskEntity]:
    """Schedule many tasks in one transaction: all or none.

    Each call is a mapping with "lambda", an optional "payload" and schedule() options.
    Raises InvalidTask whose errors are keyed "tasks[i].field" for the first invalid items.
    """
    now = now or timezone.now()
    limits.check_batch_size(len(calls))
    tasks: list[store.NewTask] = []
    errors: dict[str, list[str]] = {}
    for index, call in enumerate(calls):
        options = {key: call[key] for key in OPTIONS if key in call}
        try:
            tasks.append(validate(call.get("lambda"), call.get("payload"), now=now, **options))
        except InvalidTask as exc:
            errors.update({f"tasks[{index}].{name}": msgs for name, msgs in exc.errors.items()})
    if errors:
        raise InvalidTask(errors)
    _check_new_collections({(t.lambda_id, t.collection) for t in tasks})
    with transaction.atomic():
        results: list[TaskEntity | None] = [_existing(task) for task in tasks]
        fresh = [task for task, found in zip(tasks, results, strict=True) if found is None]
        created = iter(_create(fresh, now))
        entities = [found or next(created) for found in results]
        _wake_on_commit(entities, now)
    return entities


def _check_new_collections(pairs: set[tuple[int, str]]) -> None:
    """InvalidTask when a batch would create more than ATF_MAX_NEW_COLLECTIONS collections."""
    limit = settings.ATF_MAX_NEW_COLLECTIONS
    if len(pairs) <= limit:
        return
    lambda_ids = {lambda_id for lambda_id, _name in pairs}
    known = set(Collection.objects.filter(lambda_ref_id__in=lambda_ids)
                .values_list("lambda_ref_id", "name"))
    if len(pairs - known) > limit:
        raise InvalidTask({"tasks": [f"At most {limit} new collections per batch; this one "
                                     f"names {len(pairs - known)}."]})


def chain(*calls: Call, now: datetime | None = None) -> list[TaskEntity]:
    """Schedule calls so that each runs only after the one before it succeeded."""
    now = now or timezone.now()
    entities: list[TaskEntity] = []
    with transaction.atomic():
        for call in calls:
            after = [entities[-1].pk] if entities else list(call.options.get("after", ()))
            options = {**call.options, "after": after}
            entity, _created = schedule(call.lambda_name, call.payload, now=now, **options)
            entities.append(entity)
    return entities


def cancel(task_id: int, *, now: datetime | None = None) -> TaskEntity:
    """Cancel a task nobody runs yet; InvalidTransition if it is claimed, running or finished."""
    if not TaskEntity.objects.filter(pk=task_id).exists():
        raise TaskNotFound(f"no task {task_id}")
    store.cancel(task_id, now=now or timezone.now())
    return TaskEntity.objects.get(pk=task_id)


def set_gate(lambda_name: str, state: str, *, collection: str | None = None,
             until: datetime | None = None) -> Lambda | Collection:
    """Open, pause or drop a lambda (or one of its collections); return the gated row.

    `until` (only with a closed gate) reopens it by itself. The consumer sees the change on
    its next poll.
    """
    errors: dict[str, list[str]] = {}
    if state not in GateState.__members__.values():
        errors["state"] = [f"Unknown gate state {state!r}; use open, paused or dropped."]
    if until is not None and state == GateState.OPEN:
        errors["until"] = ["until goes with a paused or dropped gate."]
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
    logger.info("gate of %s%s set to %s%s", lambda_name, f"/{collection}" if collection else "",
                state, f" until {until.isoformat()}" if until else "",
                extra={"action": "gate_set", "lambda": lambda_name, "collection": collection})
    return row
