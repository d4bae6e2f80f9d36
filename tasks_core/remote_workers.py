"""What the worker API does for remote workers, within the caller's teams.

A remote worker holds a token, not store credentials: the service claims, starts, renews and
finishes tasks on its behalf through the store's batch statements, and pops the queues itself.
Every call names its teams (`teams`, None for staff); a task or worker of another team is
treated as unknown: not started, lost, refused, not released.

A shard of a sharded store that cannot be reached costs only its own tasks, as it does a
direct worker: the calls that take an `unreached` set (heartbeat, claim, finish, held) pass
that shard over (tasks_core.shards.each_group: at once while it is known to be down, within
shards.POOL_WAIT_S for a pool that cannot connect) and add its tasks' ids to the set, so that
the API tells the worker which tasks it could not reach and the worker applies its per-shard
heartbeat budget. Start and release spare such a shard too: its tasks are not started, or come
back after their timeout.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from operator import attrgetter, itemgetter
from typing import Any

from django.db import connections
from django.db.models import QuerySet
from django.utils import timezone

from tasks_core import (
    directory,
    json_fields,
    limits,
    queues,
    shards,
    store,
    waited_results,
    worker_registry,
)
from tasks_core.claiming import Claimer
from tasks_core.conf import atf_settings
from tasks_core.exceptions import LambdaNotFound, TaskNotFound, WorkerNotFound
from tasks_core.json_fields import Choice, Json, ListOf, Moment, Number, Optional, Text, Whole
from tasks_core.models import TaskAttempt, TaskEntity, Worker
from tasks_core.states import TaskStatus
from tasks_core.store import progress, steps

logger = logging.getLogger(__name__)

Teams = frozenset[int] | None


@dataclass(frozen=True, kw_only=True)
class ReportedEnd:
    """One finished attempt as a remote worker reports it."""

    task_id: int
    lease: int
    outcome: str  #: "success", "fatal", "retry", "timeout" or "cancelled"
    value: Any = None
    error: Mapping[str, str] | None = None
    delay_s: float | None = None
    started_at: datetime | None = None

    def result(self, worker_id: str) -> store.Result:
        return store.Result(outcome=store.Outcome(self.outcome), value=self.value,
                            error=dict(self.error) if self.error else None,
                            delay_s=self.delay_s, started_at=self.started_at, worker=worker_id)


def _reported_end(values: dict[str, Any]) -> ReportedEnd:
    return ReportedEnd(task_id=values["id"], lease=values["lease"], outcome=values["outcome"],
                       value=values["result"], error=values["error"],
                       delay_s=values["delay_s"], started_at=values["started_at"])


# What a worker sends of its tasks, declared once: the worker API reads its bodies with these
# (each item once, errors per field), and its OpenAPI schema describes them.

#: A task's lease, as a worker presents it with the task's id.
LEASE = json_fields.Record("Lease", {"id": Whole(1, limits.MAX_TASK_ID),
                                     "lease": Whole(0, limits.MAX_TASK_ID)})
#: The error of an attempt that did not succeed.
ERROR = json_fields.Record("Error", {
    name: Text(most, trim=name == "type") for name, most in limits.MAX_ERROR_CHARS.items()})
#: What a worker may report of an attempt.
OUTCOMES = [outcome.value for outcome in (
    TaskAttempt.Outcome.SUCCESS, TaskAttempt.Outcome.FATAL, TaskAttempt.Outcome.RETRY,
    TaskAttempt.Outcome.TIMEOUT, TaskAttempt.Outcome.CANCELLED)]
#: A finished attempt.
RESULT = json_fields.Record("Result", {
    **LEASE.fields, "outcome": Choice(OUTCOMES),
    "result": Optional(Json(limits.MAX_RESULT_DEPTH)), "error": Optional(ERROR),
    "delay_s": Optional(Number(0, limits.MAX_DELAY_S)), "started_at": Optional(Moment())},
    make=_reported_end)
#: Why a request that names a task twice is refused.
ONCE_EACH = "Each task may appear once."
#: The leases of a start, heartbeat or release.
LEASES = ListOf(LEASE, most=limits.MAX_WORKER_BATCH, key=itemgetter("id"),
                unique_message=ONCE_EACH)
#: The results of a finish, or those a claim carries.
RESULTS = ListOf(RESULT, most=limits.MAX_WORKER_BATCH, key=attrgetter("task_id"),
                 unique_message=ONCE_EACH)


def claimed_task_types() -> dict[str, Any]:
    """Each field of a claimed task as the claim answers it, with its Python type."""
    return store.ClaimedTask.wire_types()


def _owned(lambda_id: int, teams: Teams) -> bool:
    return teams is None or directory.by_id(lambda_id).team_id in teams


def split_lambdas(names: Iterable[str],
                  teams: Teams) -> tuple[dict[str, directory.LambdaInfo], list[str]]:
    """The named lambdas of the caller's teams, and the names that are unknown or another
    team's (one answer for both, so other teams' names do not leak)."""
    found: dict[str, directory.LambdaInfo] = {}
    missing: list[str] = []
    for name in names:
        try:
            info = directory.by_name(name)
        except LambdaNotFound:
            info = None
        if info is None or not _owned(info.id, teams):
            missing.append(name)
        else:
            found[name] = info
    return found, missing


def lambdas(names: Iterable[str], teams: Teams) -> dict[str, directory.LambdaInfo]:
    """The named lambdas; LambdaNotFound names those that are unknown or of another team."""
    found, missing = split_lambdas(names, teams)
    if missing:
        raise LambdaNotFound(f"unknown lambda(s), or not your team's: {', '.join(missing)}")
    return found


def register(*, worker_id: str, host: str, pid: int, lambda_names: Sequence[str], threads: int,
             teams: Teams, credential: str) -> Worker:
    """Add the worker's registry row, bound to the `credential` that registers it;
    WorkerExists if its id is taken."""
    lambdas(lambda_names, teams)
    return worker_registry.register(worker_id=worker_id, host=host, pid=pid,
                                    lambda_names=lambda_names, threads=threads,
                                    now=timezone.now(), credential=credential)


def worker(worker_id: str, teams: Teams, credential: str) -> Worker:
    """The running worker `worker_id` if `credential` registered it and all its lambdas are the
    caller's; else WorkerNotFound (another token's worker is not told apart from none)."""
    row = Worker.objects.filter(worker_id=worker_id, stopped_at__isnull=True,
                                credential=credential).first()
    if row is None:
        raise WorkerNotFound(f"no running worker {worker_id!r}")
    try:
        lambdas(row.lambdas, teams)
    except LambdaNotFound as exc:
        raise WorkerNotFound(f"no running worker {worker_id!r}") from exc
    return row


#: Most messages one claim request pops before it answers, stale ones included.
MAX_POPPED = 2000


def _claimer(row: Worker, queue: queues.QueueBackend, *, start: bool) -> Claimer:
    return Claimer(queue=queue, worker_id=row.worker_id,
                   lambda_ids={name: directory.by_name(name).id for name in row.lambdas},
                   priorities=atf_settings.priorities, start=start)


def claim(row: Worker, *, queue: queues.QueueBackend, max_count: int, teams: Teams,
          start: bool = False, reported_ends: Sequence[ReportedEnd] = (),
          unreached: set[int] | None = None,
          ) -> tuple[list[store.ClaimedTask], dict[int, TaskStatus | None]]:
    """Up to `max_count` claimed tasks of the worker's lambdas, of those ready now; with
    `start`, started too (enqueued -> processing: no start call follows).

    `reported_ends`, finished attempts checked as `finish` checks them, are recorded in the
    commit of the claim (on their own if no task is ready), and answered as `finish` answers
    them. With `max_count` 0 (its bound leaves the worker no room), the results alone are
    recorded. With `unreached`, a shard that cannot be reached costs only its part: its
    results are not written (answered None, their ids in `unreached`) and its messages not
    claimed."""
    if max_count <= 0:
        return [], finish(row, reported_ends, teams, unreached)
    claimer = _claimer(row, queue, start=start)
    done = _reported(row, reported_ends, teams, unreached)
    statuses, claimed = _claim_ready(claimer, max_count, done, unreached)
    return claimed, _answered(reported_ends, done, statuses)


def wait_for_work(row: Worker, *, queue: queues.QueueBackend, max_count: int,
                  wait_s: float) -> list[queues.Popped]:
    """Up to `max_count` messages of the worker's lambdas' queues, waiting up to `wait_s` for
    one; `claim_popped` claims them.

    A waiting claim holds no database connection: hundreds of idle workers then cost the
    store nothing. The claim that follows opens (or takes from the pool) a fresh one."""
    for alias in {shards.CONTROL, *shards.aliases()}:
        if not connections[alias].in_atomic_block:
            connections[alias].close()
    claimer = _claimer(row, queue, start=False)
    return claimer.queue.pop(claimer.queue_names(), max_count=max_count, wait_s=wait_s)


def claim_popped(row: Worker, popped: Sequence[queues.Popped], *, queue: queues.QueueBackend,
                 max_count: int, start: bool = False,
                 unreached: set[int] | None = None) -> list[store.ClaimedTask]:
    """Claim the first `max_count` of the `popped` messages (stale ones are dropped) and put
    the others back on their queues: what the worker's bound leaves it once its wait ends.
    `unreached`: as `claim` takes it."""
    claimer = _claimer(row, queue, start=start)
    taken, left = popped[:max(0, max_count)], popped[max(0, max_count):]
    if left:
        claimer.put_back(left)
    return claimer.claim(taken, unreached=unreached) if taken else []


@dataclass(frozen=True)
class Holding:
    """Tasks held, claimed or processing: by one worker, and by every worker of its token."""

    worker: int
    token: int


@contextmanager
def token_turn(credential: str) -> Iterator[None]:
    """A transaction that no other claim of the token `credential` runs beside, every server
    process together: the count of what its workers hold, and the claim that count bounds.
    Taken in the control database (where the token's workers are), so that no shard that is
    down holds up the claims of the others; the claim inside works on the shards as before."""
    outside = shards.current()
    with shards.using(shards.CONTROL), store.exclusive(f"held-tasks:{credential}"), \
            shards.using(outside):
        yield


def held(row: Worker, reported_ends: Sequence[ReportedEnd] = (), *,
         whole_token: bool = False, worker_most: int | None = None,
         token_most: int | None = None, unreached: set[int] | None = None) -> Holding:
    """Tasks `row` holds, and with `whole_token` those every worker of its token holds (0
    without), once `reported_ends` (with their current leases) are recorded. One statement
    (tasks_core.store.held), by the index of held tasks (task_held): a count may stop past
    `worker_most` (`token_most`), the bound that the caller holds it to. With `unreached`, a
    shard that cannot be reached is not counted (store.held)."""
    mine, token = store.held(row.worker_id, [store.Lease(end.task_id, end.lease)
                                             for end in reported_ends],
                             credential=row.credential if whole_token else None,
                             worker_most=worker_most, token_most=token_most,
                             unreached=unreached)
    return Holding(worker=mine, token=token)


def _claim_ready(claimer: Claimer, max_count: int,
                 done: Sequence[tuple[store.ClaimedTask, store.Result]],
                 unreached: set[int] | None = None,
                 ) -> tuple[list[TaskStatus | None], list[store.ClaimedTask]]:
    """Claim what the queues hold now, popping past stale messages; `done` is recorded in the
    first claim's commit (on its own if nothing is ready).

    A task enqueued again leaves its old message behind, stale. A direct worker pops past them
    in a Redis round trip each; a remote worker would need an HTTP request each, and a queue
    refilled with stale messages faster than that would starve it, so the service does it.
    """
    claimed: list[store.ClaimedTask] = []
    statuses: list[TaskStatus | None] = []
    popped = 0
    while len(claimed) < max_count and popped < MAX_POPPED:
        messages = claimer.queue.pop(claimer.queue_names(), max_count=max_count - len(claimed),
                                     wait_s=0)
        if not messages and not done:
            break
        popped += len(messages)
        ended, more = claimer.finish_and_claim(done, messages, unreached=unreached)
        if done:
            statuses, done = ended, ()
        claimed += more
        if not messages:
            break
    return statuses, claimed


def _tasks(leases: Mapping[int, int], teams: Teams, *, started: bool,
           claimed_by: QuerySet[Worker, str] | list[str],
           unreached: set[int] | None = None) -> dict[int, store.ClaimedTask]:
    """The leased tasks of the caller's teams that one of the `claimed_by` workers claimed, as
    the store's batch statements take them: a lease is bound to the worker that claimed it, so
    another worker (another token of the same team included) cannot act on it. With
    `unreached`, the tasks of a shard that cannot be reached are left out, their ids added to
    it (shards.each_part).

    The store reads lambda, attempt and limits from its own rows, never from the worker; the
    payload is left out (no write reads it).
    """
    workers = list(claimed_by)  # control rows, read where they live: named to each shard
    return {
        pk: store.ClaimedTask.from_row(pk, leases[pk], lambda_id, collection, priority, None,
                                       *rest, started=started)
        for rows in shards.each_part(leases, int,
                                     lambda part: store.held_rows(part, workers), unreached)
        for pk, _lease, lambda_id, collection, priority, *rest in rows
        if _owned(lambda_id, teams)
    }


def _workers_of(credential: str) -> QuerySet[Worker, str]:
    """Ids of the workers `credential` registered (start and release name no worker)."""
    return Worker.objects.filter(credential=credential).values_list("worker_id", flat=True)


def start(leases: Mapping[int, int], teams: Teams, credential: str) -> dict[int, bool]:
    """claimed -> processing; per task whether it started (False: it must not run).

    Idempotent: a task already processing under the same lease was started by an earlier call
    with it, whose answer the worker did not get (a retry); it is reported started again, so
    the worker runs it now rather than leave it to its heartbeat timeout. A lease is the one
    claim's, so only the worker that holds it can be told so.
    """
    tasks = _tasks(leases, teams, started=False, claimed_by=_workers_of(credential),
                   unreached=set())  # a task of a shard that cannot be reached: not started
    started = store.start_many(list(tasks.values()), now=timezone.now()) if tasks else []
    done = dict(zip(tasks, started, strict=True))
    for part in shards.each(pk for pk in tasks if not done[pk]):
        rows = TaskEntity.objects.filter(pk__in=part, status=TaskStatus.PROCESSING)
        done.update({pk: True for pk, lease in rows.values_list("pk", "lease")
                     if lease == leases[pk]})
    return {pk: done.get(pk, False) for pk in leases}


@dataclass(frozen=True)
class Renewed:
    """What a heartbeat learnt: the ids whose lease was lost, those a cancel asks to stop, and
    those of a shard that could not be reached (neither renewed nor lost)."""

    lost: set[int]
    cancel: set[int]
    unreached: set[int]


def heartbeat(row: Worker, leases: Mapping[int, int], teams: Teams, *, seen: bool) -> Renewed:
    """Renew the leases of running tasks (and the worker's last_seen); a shard that cannot be
    reached costs only its own tasks."""
    now = timezone.now()
    unreached: set[int] = set()
    owned = _tasks(leases, teams, started=True, claimed_by=[row.worker_id], unreached=unreached)
    lost = store.heartbeat({pk: leases[pk] for pk in owned}, now=now, unreached=unreached)
    if seen:
        worker_registry.seen(row.worker_id, now=now)
    cancel = store.stop_requested(set(owned) - lost - unreached, unreached)
    return Renewed(lost=lost | (set(leases) - set(owned) - unreached), cancel=cancel - unreached,
                   unreached=unreached)


def finish(row: Worker, reported_ends: Sequence[ReportedEnd], teams: Teams,
           unreached: set[int] | None = None) -> dict[int, TaskStatus | None]:
    """Record attempts' ends; per task its new status, or None when the lease was stale (or,
    with `unreached`, its shard could not be reached: its id is added to it)."""
    done = _reported(row, reported_ends, teams, unreached)
    statuses = store.finish_many(done, now=timezone.now(), unreached=unreached) if done else []
    return _answered(reported_ends, done, statuses)


def _reported(row: Worker, reported_ends: Sequence[ReportedEnd], teams: Teams,
              unreached: set[int] | None = None,
              ) -> list[tuple[store.ClaimedTask, store.Result]]:
    """The reported ends of tasks of the caller's teams that `row` holds, as the store
    records them; the others are refused (`_answered` gives them None). With `unreached`,
    the ends of a shard that cannot be reached are left out, their ids added to it."""
    if not reported_ends:
        return []
    tasks = _tasks({e.task_id: e.lease for e in reported_ends}, teams, started=True,
                   claimed_by=[row.worker_id], unreached=unreached)
    return [(tasks[e.task_id], e.result(row.worker_id)) for e in reported_ends
            if e.task_id in tasks]


def _answered(reported_ends: Sequence[ReportedEnd],
              done: Sequence[tuple[store.ClaimedTask, store.Result]],
              statuses: Sequence[TaskStatus | None]) -> dict[int, TaskStatus | None]:
    """Per reported end its task's new status; None where refused or stale."""
    written = {task.task_id: status for (task, _result), status in zip(done, statuses,
                                                                        strict=True)}
    return {e.task_id: written.get(e.task_id) for e in reported_ends}


def release(leases: Mapping[int, int], teams: Teams, credential: str) -> int:
    """Hand back tasks whose lambda never ran (claimed, or claimed and started at once); how
    many were still the worker's with these leases."""
    # a shard that cannot be reached gets its tasks back after their timeouts
    tasks = _tasks(leases, teams, started=False, claimed_by=_workers_of(credential),
                   unreached=set())
    return store.release(list(tasks.values()), now=timezone.now(), unreached=set()) \
        if tasks else 0


def deregister(row: Worker) -> None:
    """Mark the worker stopped."""
    worker_registry.stopped(row.worker_id, now=timezone.now())


def _check_running(task_id: int, teams: Teams, credential: str) -> None:
    """TaskNotFound for a task that is not running on one of the credential's workers, or
    not of its teams."""
    row = TaskEntity.objects.filter(pk=task_id, status=TaskStatus.PROCESSING,
                                    worker__in=_workers_of(credential)) \
        .values_list("lambda_ref_id", flat=True).first()
    if row is None or not _owned(row, teams):
        raise TaskNotFound(f"no running task {task_id} of this worker")


def parent_results(task_id: int, *, after_id: int, teams: Teams,
                   credential: str) -> list[tuple[int, Any]]:
    """A page of the results a running task waited for (tasks_core.waited_results.parent_results),
    for the worker that runs it (TaskNotFound otherwise)."""
    _check_running(task_id, teams, credential)
    return waited_results.parent_results(task_id, after_id=after_id)


def recorded_steps(task_id: int, *, teams: Teams, credential: str) -> dict[str, Any]:
    """The recorded steps of a task the credential's worker runs (TaskNotFound otherwise)."""
    _check_running(task_id, teams, credential)
    return steps.recorded_steps(task_id)


def record_step(task_id: int, lease: int, *, name: str, value: Any, teams: Teams,
                credential: str) -> steps.StepRecord:
    """Record a step of a task the credential's worker runs, fenced by its lease."""
    _check_running(task_id, teams, credential)
    size = len(json.dumps(value, separators=(",", ":")).encode())
    return steps.record_step(task_id, lease, name=name, value=value, size=size,
                             now=timezone.now())


def report_progress(task_id: int, *, done: float, total: float | None, note: str,
                    teams: Teams, credential: str) -> None:
    """Write the progress of a task the credential's worker runs (TaskNotFound otherwise)."""
    _check_running(task_id, teams, credential)
    progress.report(task_id, done=done, total=total, note=note, now=timezone.now())
