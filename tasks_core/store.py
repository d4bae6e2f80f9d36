"""Every write that changes a task's status: guarded (compare-and-set) updates of entity and assoc.

No other module changes a task's status. Each change names the status (and, for a worker, the
lease) it expects and updates the entity and its assoc row in one transaction; a guard that fails
changes nothing and comes back to the caller as False, an empty result or `None`.

Lock order, which keeps PostgreSQL free of deadlocks: a worker's transition writes the entity
row, then the assoc row. The consumer locks assoc rows and then entity rows with SKIP LOCKED, so
it never waits for a row a worker holds; a worker that meets a row the consumer holds waits for
the consumer's short transaction and then finds its guard failed if the lease moved on.
"""

from __future__ import annotations

import logging
import traceback as traceback_module
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F

from tasks_core import backoff, directory, pg_store, states, wakeup
from tasks_core.exceptions import InvalidTransition
from tasks_core.gating import Decision
from tasks_core.models import SHARDS, TaskAssoc, TaskAttempt, TaskDependency, TaskEntity
from tasks_core.queues.base import Message
from tasks_core.states import AssocStatus, TaskStatus

logger = logging.getLogger(__name__)

Outcome = TaskAttempt.Outcome


# --- values passed between the store and its callers ---------------------------------------


@dataclass(frozen=True, kw_only=True)
class NewTask:
    """A validated task to insert (scheduling builds these)."""

    lambda_id: int
    collection: str
    priority: str
    payload: Any
    run_at: datetime
    max_attempts: int
    idempotency_key: str | None = None
    timeout_s: float | None = None  #: None: the lambda's time limit
    parents: tuple[int, ...] = ()


@dataclass(frozen=True, kw_only=True)
class ClaimedTask:
    """A task a controller holds, with what an executor needs to run it."""

    task_id: int
    lease: int
    lambda_name: str
    collection: str
    priority: str
    payload: Any
    attempt: int  #: the attempt about to start, counting from 1
    max_attempts: int
    timeout_s: float | None = None  #: seconds the attempt may run (task's, else lambda's)


@dataclass(frozen=True, kw_only=True)
class Result:
    """What an attempt ended with, as the executor saw it."""

    outcome: Outcome
    value: Any = None  #: the JSON result, on success
    error: dict[str, str] | None = None  #: {"type", "message", "traceback"}
    delay_s: float | None = None  #: an explicit retry delay (atf.Retry(delay=...))
    started_at: datetime | None = None
    worker: str = ""


@dataclass(kw_only=True)
class DueBatch:
    """What one pass of the consumer over one lambda did."""

    messages: list[tuple[str, Message]] = field(default_factory=list)  #: (priority, message)
    reenqueued: dict[str, int] = field(default_factory=lambda: defaultdict(int))  #: by old status
    dropped: int = 0
    dead: int = 0


def error_info(exc: BaseException) -> dict[str, str]:
    """The {"type", "message", "traceback"} record of an exception."""
    return {
        "type": type(exc).__name__,
        "message": str(exc),
        "traceback": "".join(traceback_module.format_exception(exc)),
    }


def _timeouts(lambda_id: int) -> states.Timeouts:
    return states.Timeouts(
        enqueue_s=settings.ATF_ENQUEUE_TIMEOUT_S,
        claim_s=settings.ATF_CLAIM_TIMEOUT_S,
        heartbeat_s=directory.by_id(lambda_id).heartbeat_timeout_s,
    )


def _assoc_changes(target: TaskStatus, lambda_id: int, now: datetime, *,
                   run_at: datetime | None = None, delay_s: float | None = None) -> dict[str, Any]:
    return states.assoc_row(target, now=now, timeouts=_timeouts(lambda_id), run_at=run_at,
                            delay_s=delay_s)


# --- create ---------------------------------------------------------------------------------


def create(tasks: Sequence[NewTask], *, now: datetime) -> list[TaskEntity]:
    """Insert tasks with their assoc rows (and parent links) in bulk; return the entities.

    A task starts `new`; `waiting` while a parent has not yet succeeded; `cancelled` when a
    parent has already failed. Inside the caller's transaction, this joins it; outside one, on
    PostgreSQL, tasks without parents are one INSERT statement, which needs no transaction of
    its own (saving a BEGIN and a COMMIT round trip on every single schedule()).
    """
    if not tasks:  # e.g. a batch re-sent: every task already existed
        return []
    parent_status = dict(
        TaskEntity.objects.filter(pk__in={p for task in tasks for p in task.parents})
        .values_list("pk", "status")
    )
    entities = [_new_entity(task, parent_status, now) for task in tasks]
    assocs = [_assoc_changes(TaskStatus(e.status), e.lambda_ref_id, now, run_at=e.run_at)
              for e in entities]
    if connection.vendor == "postgresql" and not any(task.parents for task in tasks):
        _insert_postgres(entities, assocs)
        return entities
    with transaction.atomic(savepoint=False):
        if connection.vendor == "postgresql":
            _insert_postgres(entities, assocs)
        else:
            TaskEntity.objects.bulk_create(entities)
            TaskAssoc.objects.bulk_create(
                TaskAssoc(task_id=entity.pk, lambda_ref_id=entity.lambda_ref_id,
                          collection=entity.collection, priority=entity.priority,
                          shard=entity.pk % SHARDS, **assoc)
                for entity, assoc in zip(entities, assocs, strict=True)
            )
        TaskDependency.objects.bulk_create(
            TaskDependency(parent_id=parent, child_id=entity.pk)
            for task, entity in zip(tasks, entities, strict=True)
            for parent in task.parents
        )
    return entities


def _insert_postgres(entities: list[TaskEntity], assocs: list[dict[str, Any]]) -> None:
    """Insert entities and their assoc rows in one statement, whatever their number.

    The ORM's bulk_create spends most of its time preparing each field of each object, and
    needs a round trip per table.
    """
    ids = pg_store.insert(
        lambda_ids=[e.lambda_ref_id for e in entities],
        collections=[e.collection for e in entities], priorities=[e.priority for e in entities],
        payloads=[e.payload for e in entities], statuses=[e.status for e in entities],
        max_attempts=[e.max_attempts for e in entities], run_ats=[e.run_at for e in entities],
        idempotency_keys=[e.idempotency_key for e in entities],
        timeouts=[e.timeout_s for e in entities],
        finished_ats=[e.finished_at for e in entities],
        last_errors=[e.last_error for e in entities],
        assoc_statuses=[a["status"] for a in assocs],
        triggers=[a["next_trigger_at"] for a in assocs], created_at=entities[0].created_at,
    )
    for entity, pk in zip(entities, ids, strict=True):
        entity.pk = pk
        entity._state.adding = False
        entity._state.db = "default"


def _new_entity(task: NewTask, parent_status: Mapping[int, str], now: datetime) -> TaskEntity:
    entity = TaskEntity(
        lambda_ref_id=task.lambda_id,
        collection=task.collection,
        priority=task.priority,
        payload=task.payload,
        status=TaskStatus.NEW,
        max_attempts=task.max_attempts,
        run_at=task.run_at,
        idempotency_key=task.idempotency_key,
        timeout_s=task.timeout_s,
        created_at=now,
    )
    unsuccessful = states.FINAL - {TaskStatus.SUCCESS}
    failed = [p for p in task.parents if parent_status.get(p) in unsuccessful]
    if failed:
        entity.status = TaskStatus.CANCELLED
        entity.finished_at = now
        entity.last_error = _parent_failed(failed[0], TaskStatus(parent_status[failed[0]]))
    elif any(parent_status.get(p) != TaskStatus.SUCCESS for p in task.parents):
        entity.status = TaskStatus.WAITING
    return entity


def _parent_failed(parent_id: int, status: TaskStatus) -> dict[str, str]:
    return {"type": "ParentFailed", "message": f"parent task {parent_id} ended {status}",
            "traceback": ""}


# --- single guarded transition -------------------------------------------------------------


def transition(task_id: int, *, expected: TaskStatus, lease: int | None, target: TaskStatus,
               now: datetime, delay_s: float | None = None, lambda_id: int | None = None,
               **changes: Any) -> bool:
    """Move a task from `expected` to `target` if its lease still matches; else return False.

    `lease=None` skips the lease check (user actions such as cancel, which guard on status).
    The entity's guarded UPDATE is the compare-and-set; the assoc row follows it in the same
    transaction. Callers that know the task's lambda pass `lambda_id` and save a read.
    """
    states.check_transition(expected, target)
    if lambda_id is None:
        lambda_id = TaskEntity.objects.values_list("lambda_ref_id", flat=True).get(pk=task_id)
    run_at = changes.get("run_at")
    if target is TaskStatus.NEW and run_at is None:
        run_at = TaskEntity.objects.values_list("run_at", flat=True).get(pk=task_id)
    with transaction.atomic(savepoint=False):
        guarded = TaskEntity.objects.filter(pk=task_id, status=expected)
        if lease is not None:
            guarded = guarded.filter(lease=lease)
        if not guarded.update(status=target, **changes):
            return False
        TaskAssoc.objects.filter(task_id=task_id).update(
            **_assoc_changes(target, lambda_id, now, run_at=run_at, delay_s=delay_s)
        )
        _after_final(task_id, target, now)
    return True


# --- the consumer's batch ------------------------------------------------------------------


def enqueue_due(lambda_id: int, *, limit: int, now: datetime, skip_collections: Iterable[str],
                decide: Callable[[str], Decision]) -> DueBatch:
    """Take up to `limit` due rows of one lambda, and enqueue, drop or dead-letter each.

    Rows are taken and returned highest priority first (the order of ATF_PRIORITIES) and,
    within a priority, earliest trigger first, so the quota and the batch go to high priority
    first and the messages come back in the order they should be pushed. The new state is
    written before the caller pushes the returned messages, so a push that never happens is
    repaired when the enqueue timeout fires. Rows other consumers hold are skipped (SKIP
    LOCKED), so several consumers never enqueue one trigger twice.
    """
    batch = DueBatch()
    with transaction.atomic():
        # During this transaction the due assoc rows and their entities are locked.
        due_rows = pg_store.due if connection.vendor == "postgresql" else _due_orm
        rows = due_rows(lambda_id, limit=limit, now=now, skip_collections=list(skip_collections),
                        priorities=list(settings.ATF_PRIORITIES))
        if not rows:
            return batch
        to_enqueue: list[tuple[int, int, str]] = []
        to_bump: list[int] = []
        to_keep: list[int] = []
        to_drop: list[int] = []
        lost: list[TaskAttempt] = []
        to_kill: list[int] = []
        for pk, raw_status, lease, collection, priority, attempts, max_attempts, worker, started \
                in rows:
            status = TaskStatus(raw_status)
            if status not in states.ENQUEUEABLE:
                continue
            decision = decide(collection)
            if decision is Decision.POSTPONE:
                continue
            if decision is Decision.DROP:
                states.check_transition(status, TaskStatus.DROPPED)
                to_drop.append(pk)
                continue
            if status is TaskStatus.PROCESSING:
                lost.append(TaskAttempt(
                    task_id=pk, number=attempts, worker=worker, started_at=started or now,
                    ended_at=now, outcome=Outcome.LOST,
                    error={"type": "WorkerLost", "message": "no heartbeat within the timeout",
                           "traceback": ""},
                ))
                if attempts >= max_attempts:
                    to_kill.append(pk)
                    continue
            states.check_transition(status, TaskStatus.ENQUEUED)
            if status is not TaskStatus.NEW:
                batch.reenqueued[status.value] += 1
            # An expired `enqueued` task keeps its lease: its first message may still be in a
            # long queue, and whichever copy is popped first may claim it (a claim bumps the
            # lease, so the other copy goes stale). Bumping here would make every message of
            # a backlog older than the enqueue timeout stale before a worker reached it.
            bump = status is not TaskStatus.ENQUEUED
            to_enqueue.append((pk, lease + bump, priority))
            (to_bump if bump else to_keep).append(pk)
        if to_enqueue:
            mark = pg_store.mark_enqueued if connection.vendor == "postgresql" else _mark_orm
            mark(bump=to_bump, keep=to_keep, now=now,
                 assoc=_assoc_changes(TaskStatus.ENQUEUED, lambda_id, now))
            batch.messages = [(priority, Message(task_id=pk, lease=lease))
                              for pk, lease, priority in to_enqueue]
        TaskAttempt.objects.bulk_create(lost)
        batch.dropped = _finish_many(to_drop, TaskStatus.DROPPED, lambda_id, now,
                                     last_error={"type": "Dropped", "message": "gate dropped",
                                                 "traceback": ""})
        batch.dead = _finish_many(to_kill, TaskStatus.DEAD, lambda_id, now,
                                  last_error={"type": "WorkerLost",
                                              "message": "attempts exhausted; the last one lost "
                                                         "its worker", "traceback": ""})
    return batch


def _due_orm(lambda_id: int, *, limit: int, now: datetime, skip_collections: list[str],
             priorities: list[str]) -> list[tuple]:
    task_ids: list[int] = []
    for priority in priorities:
        if len(task_ids) >= limit:
            break
        task_ids += (
            TaskAssoc.objects.select_for_update(skip_locked=True)
            .filter(lambda_ref_id=lambda_id, priority=priority, next_trigger_at__lte=now)
            .exclude(status=AssocStatus.COMPLETED)
            .exclude(collection__in=skip_collections)
            .order_by("next_trigger_at", "task_id")
            .values_list("task_id", flat=True)[: limit - len(task_ids)]
        )
    rows = (
        TaskEntity.objects.select_for_update(skip_locked=True)
        .filter(pk__in=task_ids)
        .order_by("pk")
        .values_list("pk", "status", "lease", "collection", "priority", "attempts",
                     "max_attempts", "worker", "started_at")
    )
    position = {pk: index for index, pk in enumerate(task_ids)}
    return sorted(rows, key=lambda row: position[row[0]])


def _mark_orm(*, bump: list[int], keep: list[int], now: datetime,
              assoc: Mapping[str, Any]) -> None:
    TaskEntity.objects.filter(pk__in=bump).update(
        status=TaskStatus.ENQUEUED, lease=F("lease") + 1, enqueued_at=now
    )
    TaskEntity.objects.filter(pk__in=keep).update(enqueued_at=now)
    TaskAssoc.objects.filter(task_id__in=bump + keep).update(**assoc)


def _finish_many(task_ids: list[int], target: TaskStatus, lambda_id: int, now: datetime,
                 **changes: Any) -> int:
    if not task_ids:
        return 0
    TaskEntity.objects.filter(pk__in=task_ids).update(status=target, finished_at=now, **changes)
    TaskAssoc.objects.filter(task_id__in=task_ids).update(
        **_assoc_changes(target, lambda_id, now)
    )
    for task_id in task_ids:
        _after_final(task_id, target, now)
    return len(task_ids)


def retrigger(messages: Sequence[Message], *, at: datetime) -> int:
    """Bring forward the enqueue timeout of tasks whose messages could not be pushed."""
    with transaction.atomic():
        current = _matching_leases(messages, TaskStatus.ENQUEUED)
        return TaskAssoc.objects.filter(task_id__in=current).update(next_trigger_at=at)


def _matching_leases(messages: Sequence[Message], status: TaskStatus,
                     **filters: Any) -> list[int]:
    """Lock the tasks of `messages` that are in `status` with the message's lease; their ids."""
    wanted = {message.task_id: message.lease for message in messages}
    rows = (
        TaskEntity.objects.select_for_update()
        .filter(pk__in=list(wanted), status=status, **filters)
        .order_by("pk")
        .values_list("pk", "lease")
    )
    return [pk for pk, lease in rows if wanted[pk] == lease]


# --- the worker's side ---------------------------------------------------------------------


def claim(messages: Sequence[Message], *, worker: str, lambda_ids: Iterable[int],
          now: datetime) -> list[ClaimedTask]:
    """Claim the tasks of `messages` whose lease is current; stale messages are left out.

    Each claimed task gets a new lease, which its executor presents on every later write.
    """
    wanted = {message.task_id: message.lease for message in messages}
    lambda_ids = list(lambda_ids)
    if not wanted or not lambda_ids:
        return []
    # The claim timeout is the same for every lambda: one assoc change for the batch.
    assoc = _assoc_changes(TaskStatus.CLAIMED, lambda_ids[0], now)
    claim_rows = pg_store.claim if connection.vendor == "postgresql" else _claim_orm
    with transaction.atomic():
        rows = claim_rows(wanted, lambda_ids=lambda_ids, worker=worker, now=now, assoc=assoc)
    return [
        ClaimedTask(task_id=pk, lease=lease, lambda_name=directory.by_id(lambda_id).name,
                    collection=collection, priority=priority, payload=payload,
                    attempt=attempts + 1, max_attempts=max_attempts,
                    timeout_s=directory.by_id(lambda_id).timeout_s if timeout_s is None
                    else timeout_s)
        for pk, lease, lambda_id, collection, priority, payload, attempts, max_attempts,
        timeout_s in rows
    ]


def _claim_orm(wanted: Mapping[int, int], *, lambda_ids: list[int], worker: str,
               now: datetime, assoc: Mapping[str, Any]) -> list[tuple]:
    rows = [
        row for row in TaskEntity.objects.select_for_update()
        .filter(pk__in=list(wanted), status=TaskStatus.ENQUEUED, lambda_ref_id__in=lambda_ids)
        .order_by("pk")
        .values_list("pk", "lease", "lambda_ref_id", "collection", "priority", "payload",
                     "attempts", "max_attempts", "timeout_s")
        if wanted[row[0]] == row[1]
    ]
    ids = [row[0] for row in rows]
    TaskEntity.objects.filter(pk__in=ids).update(
        status=TaskStatus.CLAIMED, lease=F("lease") + 1, worker=worker, claimed_at=now
    )
    TaskAssoc.objects.filter(task_id__in=ids).update(**assoc)
    return [(pk, lease + 1, *rest) for pk, lease, *rest in rows]


def start(task: ClaimedTask, *, now: datetime) -> bool:
    """claimed -> processing: the executor begins the attempt; False if the lease moved on."""
    return start_many([task], now=now)[0]


def start_many(tasks: Sequence[ClaimedTask], *, now: datetime) -> list[bool]:
    """claimed -> processing for many tasks in one transaction; per task whether it started
    (False: its lease moved on, and it must not run)."""
    states.check_transition(TaskStatus.CLAIMED, TaskStatus.PROCESSING)
    leases = {task.task_id: task.lease for task in tasks}
    assocs = {task.task_id: _assoc_changes(TaskStatus.PROCESSING,
                                           directory.by_name(task.lambda_name).id, now)
              for task in tasks}
    start_rows = pg_store.start if connection.vendor == "postgresql" else _start_orm
    with transaction.atomic():
        started = start_rows(leases, assocs, now=now)
    return [task.task_id in started for task in tasks]


def _start_orm(leases: Mapping[int, int], assocs: Mapping[int, Mapping[str, Any]], *,
               now: datetime) -> set[int]:
    started = set(_matching_leases(
        [Message(task_id=pk, lease=lease) for pk, lease in leases.items()], TaskStatus.CLAIMED
    ))
    TaskEntity.objects.filter(pk__in=started).update(
        status=TaskStatus.PROCESSING, attempts=F("attempts") + 1, started_at=now,
        heartbeat_at=now,
    )
    by_change: dict[tuple, list[int]] = defaultdict(list)
    for pk in started:
        by_change[tuple(sorted(assocs[pk].items()))].append(pk)
    for change, task_ids in by_change.items():
        TaskAssoc.objects.filter(task_id__in=task_ids).update(**dict(change))
    return started


def release(tasks: Sequence[ClaimedTask], *, now: datetime) -> int:
    """Hand claimed but unstarted tasks back (a stopping worker): due again at once."""
    with transaction.atomic():
        ids = _matching_leases([Message(task_id=t.task_id, lease=t.lease) for t in tasks],
                               TaskStatus.CLAIMED)
        TaskEntity.objects.filter(pk__in=ids).update(status=TaskStatus.NEW, worker="")
        TaskAssoc.objects.filter(task_id__in=ids).update(
            status=AssocStatus.NEW, next_trigger_at=now
        )
    return len(ids)


def heartbeat(leases: Mapping[int, int], *, now: datetime) -> set[int]:
    """Renew the leases of running tasks; return the ids whose lease was lost."""
    if not leases:
        return set()
    messages = [Message(task_id=pk, lease=lease) for pk, lease in leases.items()]
    with transaction.atomic():
        alive = _matching_leases(messages, TaskStatus.PROCESSING)
        TaskEntity.objects.filter(pk__in=alive).update(heartbeat_at=now)
        by_lambda: dict[int, list[int]] = defaultdict(list)
        for pk, lambda_id in TaskAssoc.objects.filter(task_id__in=alive).values_list(
            "task_id", "lambda_ref_id"
        ):
            by_lambda[lambda_id].append(pk)
        for lambda_id, task_ids in by_lambda.items():
            TaskAssoc.objects.filter(task_id__in=task_ids).update(
                **_assoc_changes(TaskStatus.PROCESSING, lambda_id, now)
            )
    return set(leases) - set(alive)


def _ending(task: ClaimedTask, result: Result, now: datetime) -> pg_store.Ending:
    """What finishing one attempt writes: success -> success; fatal -> fatal_failure; retry ->
    retrying after the explicit delay or the lambda's backoff, or dead when the attempts are
    used up."""
    lambda_id = directory.by_name(task.lambda_name).id
    delay_s = None
    if result.outcome is Outcome.SUCCESS:
        target = TaskStatus.SUCCESS
    elif result.outcome is Outcome.FATAL:
        target = TaskStatus.FATAL_FAILURE
    elif task.attempt >= task.max_attempts:
        target = TaskStatus.DEAD
    else:
        target = TaskStatus.RETRYING
        delay_s = result.delay_s
        if delay_s is None:
            info = directory.by_id(lambda_id)
            delay_s = backoff.delay_s(task.attempt, base_s=info.backoff_base_s,
                                      cap_s=info.backoff_cap_s)
        if result.outcome is Outcome.TIMEOUT:
            # The timed-out lambda may run on for the worker's grace, after which its process
            # exits: no retry before then (workers/time_limits.py).
            delay_s = max(delay_s, 2 * settings.ATF_TIMEOUT_GRACE_S)
    states.check_transition(TaskStatus.PROCESSING, target)
    assoc = _assoc_changes(target, lambda_id, now, delay_s=delay_s)
    return pg_store.Ending(
        task_id=task.task_id, lease=task.lease, status=target,
        result=result.value if target is TaskStatus.SUCCESS else None, error=result.error,
        finished_at=now if target in states.FINAL else None,
        assoc_status=assoc["status"], next_trigger_at=assoc["next_trigger_at"],
        attempt=task.attempt, worker=result.worker, started_at=result.started_at or now,
        # A last failed attempt is marked `dead`; a timed-out one keeps saying why it ended.
        outcome=(Outcome.DEAD if target is TaskStatus.DEAD and result.outcome is Outcome.RETRY
                 else result.outcome),
    )


def finish(task: ClaimedTask, result: Result, *, now: datetime) -> TaskStatus | None:
    """Record an attempt's end; return the task's new status, or None if the lease was lost."""
    return finish_many([(task, result)], now=now)[0]


def finish_many(done: Sequence[tuple[ClaimedTask, Result]], *,
                now: datetime) -> list[TaskStatus | None]:
    """Record many attempts' ends in one transaction: per task its new status, or None for a
    task whose lease was lost (its result is refused, nothing of it is written)."""
    endings = [_ending(task, result, now) for task, result in done]
    finish_rows = pg_store.finish if connection.vendor == "postgresql" else _finish_orm
    with transaction.atomic():
        written = finish_rows(endings, now=now)
        for ending in endings:
            if written.get(ending.task_id):  # a parent: its children wait on it
                _after_final(ending.task_id, ending.status, now)
    statuses = {ending.task_id: ending.status for ending in endings if ending.task_id in written}
    return [statuses.get(task.task_id) for task, _result in done]


def _finish_orm(endings: Sequence[pg_store.Ending], *, now: datetime) -> dict[int, bool]:
    current = set(_matching_leases(
        [Message(task_id=e.task_id, lease=e.lease) for e in endings], TaskStatus.PROCESSING
    ))
    endings = [ending for ending in endings if ending.task_id in current]
    for ending in endings:
        changes = {"result": ending.result, "last_error": ending.error,
                   "finished_at": ending.finished_at}
        TaskEntity.objects.filter(pk=ending.task_id).update(
            status=ending.status, **{k: v for k, v in changes.items() if v is not None}
        )
        TaskAssoc.objects.filter(task_id=ending.task_id).update(
            status=ending.assoc_status, next_trigger_at=ending.next_trigger_at
        )
    TaskAttempt.objects.bulk_create(
        TaskAttempt(task_id=e.task_id, number=e.attempt, worker=e.worker,
                    started_at=e.started_at, ended_at=now, outcome=e.outcome, error=e.error)
        for e in endings
    )
    parents = set(TaskDependency.objects.filter(parent_id__in=current)
                  .values_list("parent_id", flat=True))
    return {ending.task_id: ending.task_id in parents for ending in endings}


# --- users' and operators' actions ---------------------------------------------------------


def cancel(task_id: int, *, now: datetime, reason: str = "cancelled") -> TaskStatus:
    """Cancel a task that no worker holds; return the status it had.

    Raises InvalidTransition for a task already claimed, running or finished.
    """
    for _ in range(5):  # the consumer may move it between our read and our write
        status = TaskStatus(TaskEntity.objects.values_list("status", flat=True).get(pk=task_id))
        if status not in states.CANCELLABLE:
            raise InvalidTransition(f"a task in status {status} cannot be cancelled; only new, "
                                    "waiting, enqueued and retrying tasks can")
        error = {"type": "Cancelled", "message": reason, "traceback": ""}
        if transition(task_id, expected=status, lease=None, target=TaskStatus.CANCELLED,
                      now=now, finished_at=now, last_error=error):
            return status
    raise InvalidTransition("the task kept changing; try again")


def requeue(task_ids: Iterable[int], *, now: datetime,
            statuses: Iterable[TaskStatus] = (TaskStatus.DEAD,)) -> int:
    """Put finished tasks (by default dead ones) back to `new` with their attempts reset."""
    wanted = frozenset(statuses)
    for status in wanted:
        states.check_transition(status, TaskStatus.NEW)
    with transaction.atomic():
        rows = list(
            TaskEntity.objects.select_for_update()
            .filter(pk__in=list(task_ids), status__in=list(wanted))
            .order_by("pk")
            .values_list("pk", "lambda_ref_id")
        )
        ids = [pk for pk, _lambda_id in rows]
        TaskEntity.objects.filter(pk__in=ids).update(
            status=TaskStatus.NEW, attempts=0, run_at=now, finished_at=None, result=None,
            worker="", last_error=None,
        )
        TaskAssoc.objects.filter(task_id__in=ids).update(
            status=AssocStatus.NEW, next_trigger_at=now
        )
        for pk in ids:
            _after_requeue(pk, now)
    return len(ids)


def run_now(task_ids: Iterable[int], *, now: datetime) -> int:
    """Make scheduled or retrying tasks due now."""
    with transaction.atomic():
        ids = list(
            TaskEntity.objects.select_for_update()
            .filter(pk__in=list(task_ids), status__in=[TaskStatus.NEW, TaskStatus.RETRYING])
            .values_list("pk", flat=True)
        )
        TaskEntity.objects.filter(pk__in=ids, status=TaskStatus.NEW).update(run_at=now)
        TaskAssoc.objects.filter(task_id__in=ids).update(next_trigger_at=now)
    return len(ids)


def discard(task_ids: Iterable[int], *, statuses: Iterable[TaskStatus] = (TaskStatus.DEAD,)) -> int:
    """Delete finished tasks (by default dead ones) for good; return how many."""
    _total, by_model = TaskEntity.objects.filter(
        pk__in=list(task_ids), status__in=list(statuses)
    ).delete()
    return by_model.get(TaskEntity._meta.label, 0)


# --- chains --------------------------------------------------------------------------------


def _after_final(task_id: int, status: TaskStatus, now: datetime) -> None:
    """Wake a finished task's waiting children, or cancel them if it did not succeed."""
    if status not in states.FINAL:
        return
    child_ids = list(
        TaskDependency.objects.filter(parent_id=task_id).values_list("child_id", flat=True)
    )
    if not child_ids:
        return
    if status is not TaskStatus.SUCCESS:
        for child in child_ids:
            _cancel_waiting(child, now, parent_id=task_id, status=status)
        return
    waiting = TaskEntity.objects.filter(pk__in=child_ids, status=TaskStatus.WAITING)
    for child in waiting.values_list("pk", flat=True):
        parents = TaskDependency.objects.filter(child_id=child).values_list("parent_id")
        unfinished = TaskEntity.objects.filter(pk__in=parents).exclude(status=TaskStatus.SUCCESS)
        if not unfinished.exists():
            run_at = max(now, TaskEntity.objects.get(pk=child).run_at)
            if transition(child, expected=TaskStatus.WAITING, lease=None, target=TaskStatus.NEW,
                          now=now, run_at=run_at) and run_at <= now:
                transaction.on_commit(wakeup.notify)  # due now: the consumer need not poll


def _cancel_waiting(task_id: int, now: datetime, *, parent_id: int, status: TaskStatus) -> None:
    error = _parent_failed(parent_id, status)
    transition(task_id, expected=TaskStatus.WAITING, lease=None, target=TaskStatus.CANCELLED,
               now=now, finished_at=now, last_error=error)


def _after_requeue(task_id: int, now: datetime) -> None:
    """A requeued parent revives the children its failure cancelled: they wait again.

    A child with another parent that is still failed stays cancelled.
    """
    failed = states.FINAL - {TaskStatus.SUCCESS}
    for child in TaskDependency.objects.filter(parent_id=task_id).values_list("child_id",
                                                                               flat=True):
        parents = TaskDependency.objects.filter(child_id=child).values_list("parent_id")
        if TaskEntity.objects.filter(pk__in=parents, status__in=list(failed)).exists():
            continue
        states.check_transition(TaskStatus.CANCELLED, TaskStatus.WAITING)
        entity = TaskEntity.objects.filter(pk=child, status=TaskStatus.CANCELLED,
                                           last_error__type="ParentFailed")
        if entity.update(status=TaskStatus.WAITING, finished_at=None, last_error=None):
            TaskAssoc.objects.filter(task_id=child).update(status=AssocStatus.NEW,
                                                          next_trigger_at=None)
            _after_requeue(child, now)
