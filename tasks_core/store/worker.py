"""The workers' side of the store: claim, start, heartbeat, finish and release, by lease."""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from tasks_core import directory, flow, shards, states, worker_registry
from tasks_core.conf import atf_settings
from tasks_core.queues.base import Message
from tasks_core.states import TaskStatus
from tasks_core.store import backends, decisions, guarded, timeouts
from tasks_core.store.values import AssocChange, ClaimedTask, Ending, Lease, Result, Starts

logger = logging.getLogger(__name__)


def _lease(task: ClaimedTask) -> Lease:
    return Lease(task.task_id, task.lease)


def _one_step(backend: backends.StoreBackend) -> contextlib.AbstractContextManager:
    """The transaction of a claim or a start: none of its own where the backend takes the step
    in one statement (atomic by itself, and two round trips shorter)."""
    return contextlib.nullcontext() if backend.worker_steps_are_one_statement \
        else shards.atomic()


def exclusive(key: str) -> contextlib.AbstractContextManager[None]:
    """A transaction that no other `exclusive(key)` runs beside, every process together (a
    worker's count of what it holds, and the claim that the count bounds)."""
    return backends.current().exclusive(key)


def held_rows(ids: Sequence[int], workers: Sequence[str]) -> list[tuple[Any, ...]]:
    """The rows of `ids` (on the shard the store works on) that one of `workers` claimed, as
    HELD_COLUMNS: what a worker's later call about a task it holds is checked against."""
    return backends.current().held_rows(ids, workers)


def held(worker: str, ending: Sequence[Lease], *, credential: str | None = None,
         worker_most: int | None = None, token_most: int | None = None,
         unreached: set[int] | None = None) -> tuple[int, int]:
    """Tasks `worker`, and every worker of `credential` (0 without), hold once the `ending`
    ones are taken off (StoreBackend.held: a count may stop past its bound). With shards, the
    sum of every shard's counts; the token's workers are read once, in the control database
    (the only one that registers workers), and counted on every shard. With `unreached`, a
    shard that cannot be reached is not counted (shards.each_group): its tasks cannot run
    while it is down, and their worker stops them within its heartbeat budget."""
    if not shards.sharded():
        return backends.current().held(worker, ending, credential=credential,
                                       worker_most=worker_most, token_most=token_most)
    token_workers = worker_registry.of_credential(credential) if credential is not None \
        else None
    endings = shards.split(ending, _lease_id)

    def held_here(part: list[Lease]) -> tuple[int, int]:
        return backends.current().held(worker, part, credential=credential,
                                       worker_most=worker_most, token_most=token_most,
                                       token_workers=token_workers)

    counts = shards.each_group({alias: endings.get(alias, []) for alias in shards.aliases()},
                               held_here, lambda part: map(_lease_id, part), unreached)
    return sum(mine for mine, _token in counts), sum(token for _mine, token in counts)


def claim(messages: Sequence[Message], *, worker: str, lambda_ids: Iterable[int],
          now: datetime, start: bool = False) -> list[ClaimedTask]:
    """Claim the tasks of `messages` whose lease is current; stale messages are left out.

    Each claimed task gets a new lease, which its executor presents on every later write.
    With `start` (tasks that go straight to idle executors) each is started in the same step,
    enqueued -> processing, as `start_many` would start it: only those returned may run.
    """
    return finish_and_claim((), messages, worker=worker, lambda_ids=lambda_ids, now=now,
                            start=start)[1]


#: One shard's part of a finish_and_claim: its results and its messages.
_Part = tuple[list[tuple[ClaimedTask, Result]], list[Message]]


def finish_and_claim(done: Sequence[tuple[ClaimedTask, Result]], messages: Sequence[Message],
                     *, worker: str, lambda_ids: Iterable[int], now: datetime,
                     start: bool = False, from_lambdas: Iterable[int] | None = None,
                     unreached: set[int] | None = None,
                     ) -> tuple[list[TaskStatus | None], list[ClaimedTask]]:
    """Record attempts' ends as `finish_many` does and claim the tasks of `messages` as `claim`
    does, in one transaction (one commit for a worker's finished attempts and its executors'
    next tasks): per result its new status (None: its lease was lost), and the claimed tasks.

    `from_lambdas`: the lambdas whose queues the messages came from, where known: only their
    flow limits apply (default: those of every lambda of `lambda_ids`).

    With shards, each shard's part is a transaction on that shard; with `unreached`, a shard
    that cannot be reached costs only its part (shards.each_group): its results are not
    written (their status None) and its messages not claimed (the shard enqueues their tasks
    again when it is back), and the ids of both join `unreached`."""
    if not shards.sharded():
        return _finish_and_claim(done, messages, worker=worker, lambda_ids=lambda_ids, now=now,
                                 start=start, from_lambdas=from_lambdas)
    lambda_ids = list(lambda_ids)
    by_done = shards.split(done, _done_id)
    by_message = shards.split(messages, _message_id)
    statuses: dict[int, TaskStatus | None] = {}
    claimed: list[ClaimedTask] = []

    def on_its_shard(part: _Part) -> None:
        results, taken = part
        written, got = _finish_and_claim(results, taken, worker=worker, lambda_ids=lambda_ids,
                                         now=now, start=start, from_lambdas=from_lambdas)
        statuses.update(zip((task.task_id for task, _result in results), written, strict=True))
        claimed.extend(got)

    def ids(part: _Part) -> list[int]:
        return [*(task.task_id for task, _result in part[0]),
                *(message.task_id for message in part[1])]

    parts: dict[str, _Part] = {alias: (by_done.get(alias, []), by_message.get(alias, []))
                              for alias in shards.aliases()
                              if alias in by_done or alias in by_message}
    shards.each_group(parts, on_its_shard, ids, unreached)
    return [statuses.get(task.task_id) for task, _result in done], claimed


def _finish_and_claim(done: Sequence[tuple[ClaimedTask, Result]], messages: Sequence[Message],
                      *, worker: str, lambda_ids: Iterable[int], now: datetime, start: bool,
                      from_lambdas: Iterable[int] | None,
                      ) -> tuple[list[TaskStatus | None], list[ClaimedTask]]:
    """finish_and_claim() on the shard the store works on."""
    leases = list({m.task_id: Lease(m.task_id, m.lease) for m in messages}.values())
    lambda_ids = list(lambda_ids)
    endings = [_ending(task, result, now) for task, result in done]
    claiming = bool(leases and lambda_ids)
    if not claiming and not endings:
        return [], []
    backend = backends.current()
    claimed: list[ClaimedTask] = []
    starts = None
    # Flow limits of the lambdas claimed, from the directory's cache: none, no work at all.
    limits = flow.limited(lambda_ids if from_lambdas is None else from_lambdas) \
        if claiming else {}
    # A claim alone takes no transaction where the backend claims in one statement.
    with shards.atomic() if endings or limits else _one_step(backend):
        statuses = _write_endings(backend, endings, now)
        # Admission first: under its locks it reads which limited lambdas hold tasks back, so
        # the finishes of the others need no statement to release one.
        admission = flow.admit(leases, limits, now=now) if limits else None
        flow.release([task for task, _result in done if task.task_id in statuses], now,
                     admission=admission)
        if admission is not None:
            leases, now = admission.leases, admission.now
            claiming = bool(leases)
        if claiming and start:
            states.check_transition(TaskStatus.ENQUEUED, TaskStatus.PROCESSING)
            assocs = {lambda_id: timeouts.assoc(TaskStatus.PROCESSING, lambda_id, now)
                      for lambda_id in lambda_ids}
            claimed, starts = backend.claim_and_start(leases, lambda_ids=lambda_ids,
                                                      worker=worker, now=now, assocs=assocs)
        elif claiming:
            # The claim timeout is the same for every lambda: one assoc change for the batch.
            assoc = timeouts.assoc(TaskStatus.CLAIMED, lambda_ids[0], now)
            claimed = backend.claim(leases, lambda_ids=lambda_ids, worker=worker, now=now,
                                    assoc=assoc)
        if admission is not None:
            admission.started(claimed, now)
    if starts is not None:
        _gated(starts, now)
    return [statuses.get(task.task_id) for task, _result in done], claimed


def start(task: ClaimedTask, *, now: datetime) -> bool:
    """claimed -> processing: the executor begins the attempt; False if the lease moved on."""
    return start_many([task], now=now)[0]


def start_many(tasks: Sequence[ClaimedTask], *, now: datetime) -> list[bool]:
    """claimed -> processing for many tasks in one transaction; per task whether it started
    (False: its lease moved on, or a gate of its lambda or collection is closed: paused, it is
    `new` again, due as soon as the gate opens; dropped, it ended `dropped`. It must not run.)"""
    states.check_transition(TaskStatus.CLAIMED, TaskStatus.PROCESSING)
    return shards.per_shard(tasks, _task_id, functools.partial(_start_here, now=now))


def _task_id(task: ClaimedTask) -> int:
    return task.task_id


def _done_id(pair: tuple[ClaimedTask, Result]) -> int:
    return pair[0].task_id


def _message_id(message: Message) -> int:
    return message.task_id


def _lease_id(lease: Lease) -> int:
    return lease.task_id


def _start_here(tasks: Sequence[ClaimedTask], *, now: datetime) -> list[bool]:
    """start_many() on the shard the store works on."""
    leases = list({task.task_id: _lease(task) for task in tasks}.values())
    assocs = {task.task_id: timeouts.assoc(TaskStatus.PROCESSING,
                                           directory.by_name(task.lambda_name).id, now)
              for task in tasks}
    backend = backends.current()
    with _one_step(backend):
        starts = backend.start(leases, assocs, now=now)
    _gated(starts, now)
    return [task.task_id in starts.started for task in tasks]


def _gated(starts: Starts, now: datetime) -> None:
    """What follows tasks a closed gate stopped at their start: a line in the log, and the
    waiting children of a dropped parent cancelled."""
    if starts.held or starts.dropped:
        logger.info("gates stopped %d task(s) at their start: %d back to new, %d dropped",
                    len(starts.held) + len(starts.dropped), len(starts.held),
                    len(starts.dropped), extra={"action": "start_gated"})
        with shards.atomic():
            for task_id in starts.dropped:  # a dropped parent cancels its waiting children
                guarded.after_final(task_id, TaskStatus.DROPPED, now)


def heartbeat(leases: Mapping[int, int], *, now: datetime,
              unreached: set[int] | None = None) -> set[int]:
    """Renew the leases of running tasks; return the ids whose lease was lost. With
    `unreached`, a shard that cannot be reached costs only its own tasks: their ids join it,
    neither renewed nor lost (shards.each_part)."""
    if not leases:
        return set()
    assoc_for = functools.partial(_processing_assoc, now=now)

    def renew(part: list[Lease]) -> set[int]:
        with shards.atomic():
            return backends.current().heartbeat(part, now=now, assoc_for=assoc_for)

    renewed = shards.each_part([Lease(pk, lease) for pk, lease in leases.items()], _lease_id,
                               renew, unreached)
    return set(leases) - set().union(*renewed) - (unreached or set())


def _processing_assoc(lambda_id: int, *, now: datetime) -> AssocChange:
    return timeouts.assoc(TaskStatus.PROCESSING, lambda_id, now)


def release(tasks: Sequence[ClaimedTask], *, now: datetime,
            unreached: set[int] | None = None) -> int:
    """Hand back tasks whose lambda never ran (a stopping worker): claimed ones, and ones
    claimed and started at once (their attempt uncounted); due again at once. With
    `unreached`, as `heartbeat` says (those come back after their claim or heartbeat
    timeout, once their shard is back)."""
    def release_here(part: list[ClaimedTask]) -> int:
        with shards.atomic():
            return backends.current().release([_lease(task) for task in part], now=now)

    return sum(shards.each_part(tasks, _task_id, release_here, unreached))


def _ending(task: ClaimedTask, result: Result, now: datetime) -> Ending:
    info = directory.by_name(task.lambda_name)
    return decisions.ending(task, result, now=now, timeouts=timeouts.of_lambda(info.id),
                            backoff_base_s=info.backoff_base_s, backoff_cap_s=info.backoff_cap_s,
                            timeout_grace_s=atf_settings.timeout_grace_s,
                            max_result_bytes=atf_settings.max_result_bytes)


def finish(task: ClaimedTask, result: Result, *, now: datetime) -> TaskStatus | None:
    """Record an attempt's end; return the task's new status, or None if the lease was lost."""
    return finish_many([(task, result)], now=now)[0]


def finish_many(done: Sequence[tuple[ClaimedTask, Result]], *, now: datetime,
                unreached: set[int] | None = None) -> list[TaskStatus | None]:
    """Record many attempts' ends in one transaction: per task its new status, or None for a
    task whose lease was lost (its result is refused, nothing of it is written). With shards,
    one transaction per shard; with `unreached`, a shard that cannot be reached costs only its
    own tasks: their ids join it, their status None (not written)."""
    return shards.per_shard(done, _done_id, functools.partial(_finish_here, now=now),
                            unreached=unreached)


def _finish_here(done: Sequence[tuple[ClaimedTask, Result]], *,
                 now: datetime) -> list[TaskStatus | None]:
    """finish_many() on the shard the store works on."""
    endings = [_ending(task, result, now) for task, result in done]
    with shards.atomic():
        statuses = _write_endings(backends.current(), endings, now)
        flow.release([task for task, _result in done if task.task_id in statuses], now)
    return [statuses.get(task.task_id) for task, _result in done]


def _write_endings(backend: backends.StoreBackend, endings: Sequence[Ending],
                   now: datetime) -> dict[int, TaskStatus]:
    """Write attempts' ends (inside the caller's transaction); the new status of each task
    whose lease was current."""
    if not endings:
        return {}
    written = backend.finish(endings, now=now)
    members: list[tuple[int, TaskStatus]] = []
    for ending in endings:
        if (followers := written.get(ending.task_id)) is None:
            continue
        if followers.has_children:  # a parent: its children wait on it
            guarded.wake_children(ending.task_id, ending.status, now)
        if followers.group_id is not None:
            members.append((followers.group_id, ending.status))
    if members:
        guarded.members_ended(members, now)
    return {ending.task_id: ending.status for ending in endings if ending.task_id in written}
