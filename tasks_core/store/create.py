"""Inserting new tasks, with their assoc rows and parent links."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from tasks_core import shards
from tasks_core.models import TaskEntity
from tasks_core.states import TaskStatus
from tasks_core.store import backends, decisions, timeouts
from tasks_core.store.values import NewTask


def create(tasks: Sequence[NewTask], *, now: datetime,
           collections: Sequence[tuple[int, str]] = ()) -> list[TaskEntity]:
    """Insert tasks with their assoc rows (and parent links) in bulk; return the entities.

    `collections`: (lambda id, name) pairs whose Collection row the insert makes where missing.

    A task starts `new`; `waiting` while a parent has not yet succeeded; `cancelled` when a
    parent has already failed. Inside the caller's transaction, this joins it; outside one, a
    backend whose insert is one statement (PostgreSQL) inserts tasks without parents without a
    transaction of its own (saving a BEGIN and a COMMIT round trip on every single schedule()).
    """
    if not tasks:  # e.g. a batch re-sent: every task already existed
        return []
    backend = backends.current()
    parents = {parent for task in tasks for parent in task.parents}
    parent_status = backend.statuses(parents) if parents else {}
    entities = [_new_entity(task, parent_status, now) for task in tasks]
    assocs = [timeouts.assoc(TaskStatus(e.status), e.lambda_ref_id, now, run_at=e.run_at)
              for e in entities]
    if backend.insert_is_one_statement and not parents:
        backend.insert(entities, assocs, collections=collections)
        return entities
    with shards.atomic(savepoint=False):
        backend.insert(entities, assocs, collections=collections)
        backend.link([(parent, entity.pk)
                      for task, entity in zip(tasks, entities, strict=True)
                      for parent in task.parents])
    return entities


#: A new task's columns in the model's order, and the value of each that _new_entity leaves as
#: is: the model builds positional arguments several times faster than keyword arguments, which
#: counts when a batch makes a thousand at once.
_COLUMNS = [field.attname for field in TaskEntity._meta.concrete_fields]
_UNSET = {field.attname: None if field.has_default() and callable(field.default)
          else field.get_default() for field in TaskEntity._meta.concrete_fields}


def _new_entity(task: NewTask, parent_status: Mapping[int, TaskStatus],
                now: datetime) -> TaskEntity:
    start = decisions.Start(status=TaskStatus.WAITING) if task.held_for_group \
        else decisions.initial(task.parents, parent_status)
    values = {
        **_UNSET,
        "lambda_ref_id": task.lambda_id,
        "collection": task.collection,
        "priority": task.priority,
        "payload": task.payload,
        "status": start.status,
        "max_attempts": task.max_attempts,
        "run_at": task.run_at,
        "idempotency_key": task.idempotency_key,
        "timeout_s": task.timeout_s,
        "limit_key": task.limit_key,
        "debounce_key": task.debounce_key,
        "group_id": task.group_id,
        "created_at": now,
        "finished_at": now if start.status is TaskStatus.CANCELLED else None,
        "last_error": start.last_error,
    }
    return TaskEntity(*[values[column] for column in _COLUMNS])
