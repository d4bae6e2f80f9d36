"""The store through Django's ORM: SQLite (the demo's store) and any database Django speaks.

Also the one implementation, on every database, of the store's colder operations (heartbeat,
release, retrigger, the single guarded transition, operators' actions, chains): the PostgreSQL
backend inherits them and replaces only the hot batch statements.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from django.db.models import F, Max

from tasks_core import gating
from tasks_core.gating import Decision, Gate, GateState
from tasks_core.models import SHARDS, Lambda, TaskAssoc, TaskAttempt, TaskDependency, TaskEntity
from tasks_core.models import Collection as CollectionRow
from tasks_core.states import ASSOC_DELETED, AssocStatus, TaskStatus
from tasks_core.store.backends.base import StoreBackend
from tasks_core.store.decisions import GATE_DROPPED
from tasks_core.store.values import (
    CLAIMED_COLUMNS,
    AssocChange,
    ClaimedTask,
    DueRow,
    Ending,
    Lease,
    LostAttempt,
    Outcome,
    Starts,
    Written,
)


def _assoc(change: AssocChange) -> dict[str, Any]:
    return {"status": change.status, "next_trigger_at": change.next_trigger_at}


def _current(leases: Sequence[Lease], *statuses: TaskStatus, **filters: Any) -> list[int]:
    """Lock the tasks of `leases` that are in one of `statuses` with that lease, in id order;
    their ids."""
    return list(_current_groups(leases, *statuses, **filters))


def _current_groups(leases: Sequence[Lease], *statuses: TaskStatus,
                    **filters: Any) -> dict[int, int | None]:
    """`_current`, with the group each task is a member of (read by the same statement)."""
    wanted = {lease.task_id: lease.lease for lease in leases}
    rows = (
        TaskEntity.objects.select_for_update()
        .filter(pk__in=list(wanted), status__in=statuses, **filters)
        .order_by("pk")
        .values_list("pk", "lease", "group_id")
    )
    return {pk: group_id for pk, lease, group_id in rows if wanted[pk] == lease}


def due_row(pk: int, status: str, lease: int, collection: str, priority: str, attempts: int,
            max_attempts: int, worker: str, started_at: datetime | None,
            cancel_requested: bool) -> DueRow:
    return DueRow(task_id=pk, status=TaskStatus(status), lease=lease, collection=collection,
                  priority=priority, attempts=attempts, max_attempts=max_attempts, worker=worker,
                  started_at=started_at, cancel_requested=cancel_requested)


def _next_attempt_numbers(task_ids: Iterable[int]) -> defaultdict[int, int]:
    """The number each task's next attempt row gets: one after its last row, so numbers count
    on across requeues (which reset `attempts`)."""
    last = (TaskAttempt.objects.filter(task_id__in=list(task_ids)).values("task_id")
            .annotate(last=Max("number")).values_list("task_id", "last"))
    numbers: defaultdict[int, int] = defaultdict(lambda: 1)
    numbers.update({task_id: number + 1 for task_id, number in last})
    return numbers


def _gate_decisions(task_ids: Collection[int], now: datetime) -> dict[int, Decision]:
    """What the gates of each task's lambda and collection say at `now` (three reads)."""
    rows = list(TaskEntity.objects.filter(pk__in=list(task_ids))
                .values_list("pk", "lambda_ref_id", "collection"))
    lambda_ids = {lambda_id for _pk, lambda_id, _collection in rows}
    lambda_gates = {pk: Gate(state=GateState(state), until=until) for pk, state, until in
                    Lambda.objects.filter(pk__in=lambda_ids)
                    .values_list("pk", "gate", "gate_until")}
    collection_gates = {
        (lambda_id, name): Gate(state=GateState(state), until=until)
        for lambda_id, name, state, until in
        CollectionRow.objects.filter(lambda_ref_id__in=lambda_ids)
        .exclude(gate=GateState.OPEN).values_list("lambda_ref_id", "name", "gate", "gate_until")
    }
    return {pk: gating.decide(lambda_gates[lambda_id],
                              collection_gates.get((lambda_id, collection), gating.OPEN), now)
            for pk, lambda_id, collection in rows}


class OrmBackend(StoreBackend):
    """Each step a query or an update through the ORM."""

    def statuses(self, task_ids: Collection[int]) -> dict[int, TaskStatus]:
        rows = TaskEntity.objects.filter(pk__in=list(task_ids)).values_list("pk", "status")
        return {pk: TaskStatus(status) for pk, status in rows}

    def insert(self, entities: Sequence[TaskEntity], assocs: Sequence[AssocChange], *,
               collections: Sequence[tuple[int, str]] = ()) -> None:
        CollectionRow.objects.bulk_create(
            [CollectionRow(lambda_ref_id=lambda_id, name=name) for lambda_id, name in collections],
            ignore_conflicts=True,
        )
        TaskEntity.objects.bulk_create(entities)
        TaskAssoc.objects.bulk_create(
            TaskAssoc(task_id=entity.pk, lambda_ref_id=entity.lambda_ref_id,
                      collection=entity.collection, priority=entity.priority,
                      shard=entity.pk % SHARDS, **_assoc(assoc))
            for entity, assoc in zip(entities, assocs, strict=True)
        )

    def link(self, edges: Sequence[tuple[int, int]]) -> None:
        TaskDependency.objects.bulk_create(
            TaskDependency(parent_id=parent, child_id=child) for parent, child in edges
        )

    def lambda_and_run_at(self, task_id: int) -> tuple[int, datetime]:
        return TaskEntity.objects.values_list("lambda_ref_id", "run_at").get(pk=task_id)

    def transition(self, task_id: int, *, expected: TaskStatus, lease: int | None,
                   target: TaskStatus, changes: Mapping[str, Any], assoc: AssocChange) -> bool:
        guarded = TaskEntity.objects.filter(pk=task_id, status=expected)
        if lease is not None:
            guarded = guarded.filter(lease=lease)
        if not guarded.update(status=target, **changes):
            return False
        TaskAssoc.objects.filter(task_id=task_id).update(**_assoc(assoc))
        return True

    # --- the consumer -----------------------------------------------------------------------

    def due(self, lambda_id: int, *, limit: int, now: datetime, skip_collections: list[str],
            priorities: list[str]) -> list[DueRow]:
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
                         "max_attempts", "worker", "started_at", "cancel_requested_at")
        )
        position = {pk: index for index, pk in enumerate(task_ids)}
        return [due_row(*row[:-1], cancel_requested=row[-1] is not None)
                for row in sorted(rows, key=lambda row: position[row[0]])]

    def mark_enqueued(self, *, bump: list[int], keep: list[int], now: datetime,
                      assoc: AssocChange) -> None:
        TaskEntity.objects.filter(pk__in=bump).update(
            status=TaskStatus.ENQUEUED, lease=F("lease") + 1, enqueued_at=now
        )
        # A kept row keeps its enqueued_at: the queue's age is counted from it.
        TaskAssoc.objects.filter(task_id__in=bump + keep).update(**_assoc(assoc))

    def record_lost(self, attempts: Sequence[LostAttempt], *, now: datetime,
                    error: Mapping[str, str]) -> None:
        numbers = _next_attempt_numbers(a.task_id for a in attempts)
        TaskAttempt.objects.bulk_create(
            TaskAttempt(task_id=a.task_id, number=numbers[a.task_id], worker=a.worker,
                        started_at=a.started_at, ended_at=now, outcome=Outcome.LOST,
                        error=dict(error))
            for a in attempts
        )

    def end(self, task_ids: list[int], target: TaskStatus, *, now: datetime,
            assoc: AssocChange, last_error: Mapping[str, str]) -> None:
        TaskEntity.objects.filter(pk__in=task_ids).update(status=target, finished_at=now,
                                                          last_error=dict(last_error))
        TaskAssoc.objects.filter(task_id__in=task_ids).update(**_assoc(assoc))

    def retrigger(self, leases: Sequence[Lease], *, at: datetime) -> int:
        current = _current(leases, TaskStatus.ENQUEUED)
        return TaskAssoc.objects.filter(task_id__in=current).update(next_trigger_at=at)

    # --- the workers ------------------------------------------------------------------------

    def claim(self, leases: Sequence[Lease], *, lambda_ids: list[int], worker: str,
              now: datetime, assoc: AssocChange) -> list[ClaimedTask]:
        wanted = {lease.task_id: lease.lease for lease in leases}
        rows = [
            row for row in TaskEntity.objects.select_for_update()
            .filter(pk__in=list(wanted), status=TaskStatus.ENQUEUED, lambda_ref_id__in=lambda_ids)
            .order_by("pk")
            .values_list(*CLAIMED_COLUMNS)
            if wanted[row[0]] == row[1]
        ]
        ids = [row[0] for row in rows]
        TaskEntity.objects.filter(pk__in=ids).update(
            status=TaskStatus.CLAIMED, lease=F("lease") + 1, worker=worker, claimed_at=now
        )
        TaskAssoc.objects.filter(task_id__in=ids).update(**_assoc(assoc))
        return [ClaimedTask.from_row(pk, lease + 1, *rest) for pk, lease, *rest in rows]

    def start(self, leases: Sequence[Lease], assocs: Mapping[int, AssocChange], *,
              now: datetime) -> Starts:
        gates = _gate_decisions(_current(leases, TaskStatus.CLAIMED), now)
        starts = Starts(
            started={pk for pk, decision in gates.items() if decision is Decision.ENQUEUE},
            held={pk for pk, decision in gates.items() if decision is Decision.POSTPONE},
            dropped={pk for pk, decision in gates.items() if decision is Decision.DROP},
        )
        TaskEntity.objects.filter(pk__in=starts.held).update(status=TaskStatus.NEW, worker="")
        TaskAssoc.objects.filter(task_id__in=starts.held).update(status=AssocStatus.NEW,
                                                                 next_trigger_at=now)
        TaskEntity.objects.filter(pk__in=starts.dropped).update(
            status=TaskStatus.DROPPED, finished_at=now, last_error=dict(GATE_DROPPED))
        TaskAssoc.objects.filter(task_id__in=starts.dropped).update(
            status=AssocStatus.COMPLETED, next_trigger_at=None)
        started = starts.started
        TaskEntity.objects.filter(pk__in=started).update(
            status=TaskStatus.PROCESSING, attempts=F("attempts") + 1, started_at=now,
            heartbeat_at=now,
        )
        by_change: dict[AssocChange, list[int]] = defaultdict(list)
        for pk in started:
            by_change[assocs[pk]].append(pk)
        for change, task_ids in by_change.items():
            TaskAssoc.objects.filter(task_id__in=task_ids).update(**_assoc(change))
        return starts

    def heartbeat(self, leases: Sequence[Lease], *, now: datetime,
                  assoc_for: Callable[[int], AssocChange]) -> set[int]:
        alive = _current(leases, TaskStatus.PROCESSING)
        TaskEntity.objects.filter(pk__in=alive).update(heartbeat_at=now)
        by_lambda: dict[int, list[int]] = defaultdict(list)
        for pk, lambda_id in TaskAssoc.objects.filter(task_id__in=alive).values_list(
            "task_id", "lambda_ref_id"
        ):
            by_lambda[lambda_id].append(pk)
        for lambda_id, task_ids in by_lambda.items():
            TaskAssoc.objects.filter(task_id__in=task_ids).update(**_assoc(assoc_for(lambda_id)))
        return set(alive)

    def release(self, leases: Sequence[Lease], *, now: datetime) -> int:
        ids = _current(leases, TaskStatus.CLAIMED, TaskStatus.PROCESSING)
        TaskEntity.objects.filter(pk__in=ids, status=TaskStatus.PROCESSING).update(
            attempts=F("attempts") - 1)
        TaskEntity.objects.filter(pk__in=ids).update(status=TaskStatus.NEW, worker="")
        TaskAssoc.objects.filter(task_id__in=ids).update(status=AssocStatus.NEW,
                                                         next_trigger_at=now)
        return len(ids)

    def finish(self, endings: Sequence[Ending], *, now: datetime) -> dict[int, Written]:
        groups = _current_groups([Lease(e.task_id, e.lease) for e in endings],
                                 TaskStatus.PROCESSING)
        current = set(groups)
        endings = [ending for ending in endings if ending.task_id in current]
        for ending in endings:
            changes = {"result": ending.result, "last_error": ending.error,
                       "finished_at": ending.finished_at}
            TaskEntity.objects.filter(pk=ending.task_id).update(
                status=ending.status, **{k: v for k, v in changes.items() if v is not None}
            )
            assoc = TaskAssoc.objects.filter(task_id=ending.task_id)
            if ending.status in ASSOC_DELETED:
                assoc.delete()
            else:
                assoc.update(**_assoc(ending.assoc))
        # A success has no attempt row: the task's row holds it (tasks_core.attempt_history).
        recorded = [e for e in endings if e.status is not TaskStatus.SUCCESS]
        numbers = _next_attempt_numbers(e.task_id for e in recorded)
        TaskAttempt.objects.bulk_create(
            TaskAttempt(task_id=e.task_id, number=numbers[e.task_id], worker=e.worker,
                        started_at=e.started_at, ended_at=now, outcome=e.outcome, error=e.error)
            for e in recorded
        )
        parents = set(TaskDependency.objects.filter(parent_id__in=current)
                      .values_list("parent_id", flat=True))
        return {ending.task_id: Written(ending.task_id in parents, groups.get(ending.task_id))
                for ending in endings}

    def group_of(self, task_id: int) -> int | None:
        return TaskEntity.objects.filter(pk=task_id).values_list("group_id", flat=True).first()

    # --- users and operators ----------------------------------------------------------------

    def requeue(self, task_ids: Collection[int], statuses: Collection[TaskStatus], *,
                now: datetime) -> list[int]:
        ids = list(
            TaskEntity.objects.select_for_update()
            .filter(pk__in=list(task_ids), status__in=list(statuses))
            .order_by("pk")
            .values_list("pk", flat=True)
        )
        TaskEntity.objects.filter(pk__in=ids).update(
            status=TaskStatus.NEW, attempts=0, run_at=now, finished_at=None, result=None,
            worker="", last_error=None, cancel_requested_at=None,
        )
        TaskAssoc.objects.filter(task_id__in=ids).update(status=AssocStatus.NEW,
                                                         next_trigger_at=now)
        return ids

    def run_now(self, task_ids: Collection[int], *, now: datetime) -> int:
        ids = list(
            TaskEntity.objects.select_for_update()
            .filter(pk__in=list(task_ids), status__in=[TaskStatus.NEW, TaskStatus.RETRYING])
            .values_list("pk", flat=True)
        )
        TaskEntity.objects.filter(pk__in=ids, status=TaskStatus.NEW).update(run_at=now)
        TaskAssoc.objects.filter(task_id__in=ids).update(next_trigger_at=now)
        return len(ids)

    def discard(self, task_ids: Collection[int], statuses: Collection[TaskStatus]) -> int:
        _total, by_model = TaskEntity.objects.filter(
            pk__in=list(task_ids), status__in=list(statuses)
        ).delete()
        return by_model.get(TaskEntity._meta.label, 0)

    # --- chains -----------------------------------------------------------------------------

    def children(self, parent_id: int) -> list[int]:
        return list(TaskDependency.objects.filter(parent_id=parent_id)
                    .values_list("child_id", flat=True))

    def parent_statuses(self, child_id: int) -> list[TaskStatus]:
        parents = TaskDependency.objects.filter(child_id=child_id).values_list("parent_id")
        return [TaskStatus(status) for status in
                TaskEntity.objects.filter(pk__in=parents).values_list("status", flat=True)]

    def revive(self, child_id: int) -> bool:
        entity = TaskEntity.objects.filter(pk=child_id, status=TaskStatus.CANCELLED,
                                           last_error__type="ParentFailed")
        if not entity.update(status=TaskStatus.WAITING, finished_at=None, last_error=None):
            return False
        TaskAssoc.objects.filter(task_id=child_id).update(status=AssocStatus.NEW,
                                                          next_trigger_at=None)
        return True
