"""Every operator action, in one place: cancel, requeue, run now, discard, gates and options.

The API's views, the console's actions and the management commands call these functions and
nothing else to act on an operator's behalf, so each rule is written once:

- *Scope.* Every function takes the actor's `access.Scope` first. A task or lambda outside it
  is answered exactly like one that does not exist (TaskNotFound, LambdaNotFound), so another
  team's ids never leak; a bulk action silently leaves such tasks out.
- *Limits.* A bulk action takes ids (at most `limits.MAX_IDS`) or a queryset, and works through
  the tasks in id order, `limits.CHUNK` per transaction, so no action holds a long lock.
- *Errors.* Bad input raises InvalidTask with field errors; an action the task's status does
  not allow raises InvalidTransition. Front ends turn these into a 400/409, a form error or a
  command's one-line message.

One section per kind of target: scheduling (tasks and operators' periodic schedules), single
tasks, bulk actions on tasks, dead letters, gates,
lambda options.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Q, QuerySet
from django.utils import timezone

from tasks_core import (
    directory,
    limits,
    overrides,
    periodic,
    scheduling,
    shards,
    states,
    store,
    wakeup,
)
from tasks_core.access import Scope
from tasks_core.exceptions import InvalidTask, InvalidTransition, LambdaNotFound, TaskNotFound
from tasks_core.models import Collection, Lambda, PeriodicTask, TaskAttempt, TaskEntity
from tasks_core.states import TaskStatus

logger = logging.getLogger(__name__)

#: Tasks the actor may select: ids, or a queryset (the console's selection).
Selection = Iterable[int] | QuerySet[TaskEntity]


@dataclass(frozen=True, kw_only=True)
class Done:
    """What a bulk action did: tasks it changed of those selected, and why others were not."""

    selected: int
    changed: int
    problems: tuple[str, ...] = ()

    @property
    def skipped(self) -> int:
        return self.selected - self.changed


# --- scheduling ----------------------------------------------------------------------------


def schedule(scope: Scope, request: scheduling.TaskRequest, *,
             now: datetime | None = None) -> tuple[TaskEntity, bool]:
    """scheduling.schedule() of a lambda of the scope (another team's is answered as an
    unknown one), after parents the scope holds."""
    scope.check_may_follow(request.after)
    return scheduling.schedule(request, now=now, teams=scope.team_ids)


def schedule_many(scope: Scope, requests: Sequence[scheduling.TaskRequest], *,
                  now: datetime | None = None) -> list[TaskEntity]:
    """scheduling.schedule_many() with the checks of `schedule` for every request."""
    scope.check_may_follow(pk for request in requests for pk in request.after)
    return scheduling.schedule_many(requests, now=now, teams=scope.team_ids)


def save_periodic(scope: Scope, row: PeriodicTask, changes: Mapping[str, Any], *,
                  now: datetime | None = None) -> PeriodicTask:
    """periodic.save_row() of an operator's schedule whose lambda, before and after the
    change, is the scope's; NotYourTeam otherwise."""
    lambda_rows = [changes.get("lambda_ref"), row.lambda_ref if row.lambda_ref_id else None]
    scope.check_may_schedule(lam.name for lam in lambda_rows if lam is not None)
    return periodic.save_row(row, changes, now=now or timezone.now())


# --- one task ------------------------------------------------------------------------------


def task(scope: Scope, task_id: int) -> TaskEntity:
    """The task `task_id` if the scope holds it; TaskNotFound otherwise."""
    with shards.on(task_id):
        found = scope.tasks().filter(pk=task_id).first()
    if found is None:
        raise TaskNotFound(f"no task {task_id}")
    return found


def worked_by(worker_id: str) -> Q:
    """Tasks a worker process runs (claimed or processing, by their `worker`), ran to success
    (`worker` too: a success has no attempt row) or ran otherwise (an attempt row of it).

    One id list of three probes, each by an index of its own (task_held, task_succeeded_by,
    attempt_worker): as one condition OR'd together, PostgreSQL could use none of them and
    read the whole task table."""
    tasks = TaskEntity.objects.order_by()
    held = tasks.filter(status__in=[TaskStatus.CLAIMED, TaskStatus.PROCESSING], worker=worker_id)
    succeeded = tasks.filter(status=TaskStatus.SUCCESS, worker=worker_id)
    attempted = TaskAttempt.objects.order_by().filter(worker=worker_id)
    return Q(pk__in=held.values("pk").union(succeeded.values("pk"),
                                            attempted.values("task_id"), all=True))


def cancel(scope: Scope, task_id: int, *, now: datetime | None = None) -> TaskEntity:
    """Cancel a task; a running one is asked to stop (it stays `processing` until its worker
    has stopped it). InvalidTransition if it finished."""
    return scheduling.cancel(task(scope, task_id).pk, now=now or timezone.now())


def requeue(scope: Scope, task_id: int, *, now: datetime | None = None) -> TaskEntity:
    """Put a task that finished without success (fatal_failure, dead, cancelled, dropped) back
    to `new`, attempts reset; InvalidTransition for any other status."""
    found = task(scope, task_id)
    with shards.on(task_id):
        if not _requeue_ids([found.pk], now or timezone.now(), states.REQUEUEABLE):
            raise InvalidTransition(f"a task in status {_status(found.pk)} cannot be requeued; "
                                    f"only {_listed(states.REQUEUEABLE)} tasks can")
        return TaskEntity.objects.get(pk=found.pk)


def run_now(scope: Scope, task_id: int, *, now: datetime | None = None) -> TaskEntity:
    """Make a delayed (`new`, due later) or `retrying` task due now; InvalidTransition for any
    other."""
    now = now or timezone.now()
    found = task(scope, task_id)
    with shards.on(task_id):
        if not _run_now_ids([found.pk], now):
            raise InvalidTransition(f"a task in status {_status(found.pk)} cannot be run now; "
                                    "only delayed new tasks (due later) and retrying tasks can")
        return TaskEntity.objects.get(pk=found.pk)


def _status(task_id: int) -> str:
    return TaskEntity.objects.values_list("status", flat=True).get(pk=task_id)


def _listed(statuses: Iterable[TaskStatus]) -> str:
    return ", ".join(sorted(statuses))


# --- many tasks ----------------------------------------------------------------------------


def _selected(scope: Scope, selection: Selection) -> QuerySet[TaskEntity]:
    """The selection as a queryset of the scope's tasks."""
    if isinstance(selection, QuerySet):
        queryset = selection
    else:
        ids = list(selection)
        if len(ids) > limits.MAX_IDS:
            raise InvalidTask({"ids": [f"At most {limits.MAX_IDS} ids per request."]})
        queryset = TaskEntity.objects.filter(pk__in=ids)
    return scope.filter(queryset, "lambda_ref__team")


def _chunks(tasks: QuerySet[TaskEntity]) -> Iterator[list[int]]:
    """Ids of `tasks` in ascending order, limits.CHUNK at a time (keyset pagination: rows an
    action changed or deleted never shift the next chunk), shard after shard: each chunk is
    taken, and acted on, on its shard (the store works on it until the next chunk); a
    queryset bound to one shard (the console's shard filter) only on that one."""
    pinned = getattr(tasks, "_db", None)  # set by .using(); None: the router decides
    for alias in [pinned] if pinned is not None else shards.aliases():
        with shards.using(alias):
            last = 0
            while ids := list(tasks.filter(pk__gt=last).order_by("pk")
                              .values_list("pk", flat=True)[:limits.CHUNK]):
                yield ids
                last = ids[-1]


#: Told the number of tasks of each chunk once it is done (a command's progress bar).
Progress = Callable[[int], None] | None


def _each_chunk(scope: Scope, selection: Selection, change: Callable[[list[int]], int],
                progress: Progress) -> Done:
    selected = changed = 0
    for ids in _chunks(_selected(scope, selection)):
        selected += len(ids)
        changed += change(ids)
        if progress is not None:
            progress(len(ids))
    return Done(selected=selected, changed=changed)


def _requeue_ids(ids: list[int], now: datetime, statuses: frozenset[TaskStatus]) -> int:
    with shards.atomic():
        moved = store.requeue(ids, now=now, statuses=statuses)
        if moved:
            shards.on_commit(wakeup.notify)
    return moved


def _run_now_ids(ids: list[int], now: datetime) -> int:
    """Make the delayed and retrying tasks among `ids` due now (others are left alone)."""
    runnable = Q(status=TaskStatus.RETRYING) | Q(status=TaskStatus.NEW, run_at__gt=now)
    with shards.atomic():
        wanted = list(TaskEntity.objects.filter(runnable, pk__in=ids)
                      .values_list("pk", flat=True))
        moved = store.run_now(wanted, now=now) if wanted else 0
        if moved:
            shards.on_commit(wakeup.notify)
    return moved


def cancel_many(scope: Scope, selection: Selection, *, now: datetime | None = None) -> Done:
    """Cancel the selected tasks; running ones are asked to stop, and `problems` says so, as
    it names those that could not be cancelled (they finished)."""
    now = now or timezone.now()
    selected = changed = 0
    problems: list[str] = []
    for ids in _chunks(_selected(scope, selection)):
        selected += len(ids)
        for pk in ids:
            try:
                task = scheduling.cancel(pk, now=now)
                changed += 1
            except (InvalidTransition, TaskNotFound) as exc:
                problems.append(f"Task #{pk} not cancelled: {exc}.")
                continue
            if task.status == TaskStatus.PROCESSING:
                problems.append(f"Task #{pk} is running: its worker is asked to stop it.")
    logger.info("cancelled %d of %d task(s)", changed, selected,
                extra={"action": "tasks_cancelled"})
    return Done(selected=selected, changed=changed, problems=tuple(problems))


def requeue_many(scope: Scope, selection: Selection, *, now: datetime | None = None,
                 statuses: Iterable[TaskStatus] = states.REQUEUEABLE,
                 progress: Progress = None) -> Done:
    """Put the selected tasks in one of `statuses` (finished without success) back to `new`."""
    now, wanted = now or timezone.now(), frozenset(statuses)
    done = _each_chunk(scope, selection, lambda ids: _requeue_ids(ids, now, wanted), progress)
    logger.info("requeued %d of %d task(s)", done.changed, done.selected,
                extra={"action": "tasks_requeued"})
    return done


def run_now_many(scope: Scope, selection: Selection, *, now: datetime | None = None) -> Done:
    """Make the selected delayed and retrying tasks due now."""
    now = now or timezone.now()
    done = _each_chunk(scope, selection, lambda ids: _run_now_ids(ids, now), None)
    logger.info("made %d of %d task(s) due now", done.changed, done.selected,
                extra={"action": "tasks_run_now"})
    return done


def discard_many(scope: Scope, selection: Selection, *, progress: Progress = None) -> Done:
    """Delete the selected dead tasks for good, with their attempt history."""
    done = _each_chunk(scope, selection, store.discard, progress)
    logger.info("discarded %d of %d task(s)", done.changed, done.selected,
                extra={"action": "tasks_discarded"})
    return done


# --- dead letters ----------------------------------------------------------------------------


def dead_letters(scope: Scope, *, ids: Iterable[int] | None = None,
                 lambda_name: str | None = None, collection: str | None = None,
                 listing: bool = False) -> QuerySet[TaskEntity]:
    """The scope's dead tasks: those in `ids`, or of a lambda (and one of its collections).

    A selection to act on names either `ids` or a lambda, so that no requeue or discard takes
    the whole queue by mistake; a `listing` may name neither. InvalidTask for a bad selection
    or a lambda the scope does not hold.
    """
    if not listing and (ids is None) == (lambda_name is None):
        raise InvalidTask({"non_field_errors": [
            "Name the dead tasks: ids, or a lambda (with an optional collection), not both."]})
    if collection is not None and lambda_name is None:
        raise InvalidTask({"collection": ["A collection goes with a lambda."]})
    chosen = scope.tasks() if ids is None else _selected(scope, ids)
    dead = chosen.filter(status=TaskStatus.DEAD)
    if lambda_name is not None:
        if not scope.lambdas().filter(name=lambda_name).exists():
            raise InvalidTask({"lambda": [f"Unknown lambda {lambda_name!r}."]})
        dead = dead.filter(lambda_ref__name=lambda_name)
    if collection is not None:
        dead = dead.filter(collection=collection)
    return dead


# --- gates ---------------------------------------------------------------------------------


def gate(scope: Scope, lambda_name: str, state: str, *, collection: str | None = None,
         until: datetime | None = None, now: datetime | None = None) -> Lambda | Collection:
    """Open, pause or drop a lambda of the scope (or one of its collections); return the row.

    `until` (a future time, only with a closed gate) reopens it by itself. LambdaNotFound for a
    lambda outside the scope; InvalidTask for a bad state or time.
    """
    if until is not None and until <= (now or timezone.now()):
        raise InvalidTask({"until": ["until must be in the future."]})
    if not scope.lambdas().filter(name=lambda_name).exists():
        raise LambdaNotFound(f"unknown lambda {lambda_name!r}")
    return scheduling.set_gate(lambda_name, state, collection=collection, until=until)


# --- lambda options --------------------------------------------------------------------------


def set_options(scope: Scope, lambda_name: str, changes: Mapping[str, Any], *, by: str,
                now: datetime | None = None) -> Lambda:
    """Set (a value) or clear (None) operator overrides of a lambda of the scope, recording
    `by`; return the lambda with its overrides. LambdaNotFound for a lambda outside the scope;
    InvalidOverride (field errors) for a bad option or value, and then nothing changes."""
    lambdas = scope.lambdas().prefetch_related("overrides")
    row = lambdas.filter(name=lambda_name).first()
    if row is None:
        raise LambdaNotFound(f"unknown lambda {lambda_name!r}")
    if changes:
        overrides.apply(row, changes, by=by, now=now or timezone.now())
        directory.clear()  # this process sees the new values at once
        row = lambdas.get(pk=row.pk)
    return row
