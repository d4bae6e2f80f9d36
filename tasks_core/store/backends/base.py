"""The store's one seam: every read and write the store makes, as one interface.

tasks_core.store decides (tasks_core.store.decisions) and calls these inside the transaction it
opens; a backend only carries a decision out. Every write that names a lease or an expected
status is a compare-and-set: a row whose lease or status moved on is left alone and left out
of what the method returns. Rows are locked in id order (the lock order of tasks_core.store).
"""

from __future__ import annotations

import contextlib
import threading
import zlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from tasks_core import directory, shards
from tasks_core.models import TaskEntity
from tasks_core.states import TaskStatus
from tasks_core.store.values import (
    HELD_COLUMNS,
    AssocChange,
    ClaimedTask,
    DueRow,
    Ending,
    Lease,
    LostAttempt,
    Starts,
    Written,
)

#: Locks of `StoreBackend.exclusive` in this process, a key taking one by its hash (two keys
#: that share one wait for each other, which is only slower).
_EXCLUSIVE_LOCKS = [threading.Lock() for _ in range(64)]

#: The statuses of the tasks a worker holds (those the partial index task_held covers).
HELD = (TaskStatus.CLAIMED, TaskStatus.PROCESSING)


class StoreBackend(ABC):
    """The state changes of the task store on one kind of database."""

    #: insert() is one statement: outside a transaction it needs none of its own.
    insert_is_one_statement: bool = False

    # --- create ---------------------------------------------------------------------------

    @abstractmethod
    def statuses(self, task_ids: Collection[int]) -> dict[int, TaskStatus]:
        """The status of each task of `task_ids` that exists."""

    @abstractmethod
    def insert(self, entities: Sequence[TaskEntity], assocs: Sequence[AssocChange], *,
               collections: Sequence[tuple[int, str]] = ()) -> None:
        """Insert unsaved entities with their assoc rows; set each entity's primary key.

        `collections`: (lambda id, name) pairs whose Collection row is made first where it is
        missing, so that every collection a task names can be listed and gated.
        """

    @abstractmethod
    def link(self, edges: Sequence[tuple[int, int]]) -> None:
        """Record (parent, child) dependencies."""

    # --- one guarded transition -----------------------------------------------------------

    @abstractmethod
    def lambda_and_run_at(self, task_id: int) -> tuple[int, datetime]:
        """A task's lambda id and run_at."""

    @abstractmethod
    def transition(self, task_id: int, *, expected: TaskStatus, lease: int | None,
                   target: TaskStatus, changes: Mapping[str, Any], assoc: AssocChange) -> bool:
        """`expected` -> `target` with `changes` on the entity if its lease matches (`None`:
        any lease), and `assoc` on its assoc row; whether it moved."""

    # --- the consumer -----------------------------------------------------------------------

    @abstractmethod
    def due(self, lambda_id: int, *, limit: int, now: datetime, skip_collections: list[str],
            priorities: list[str]) -> list[DueRow]:
        """Lock up to `limit` due rows of a lambda that no other consumer holds (SKIP LOCKED),
        outside `skip_collections`: highest priority first (the order of `priorities`) and,
        within a priority, earliest trigger first; returned in that order."""

    @abstractmethod
    def mark_enqueued(self, *, bump: list[int], keep: list[int], now: datetime,
                      assoc: AssocChange) -> None:
        """Locked rows become `enqueued`: `bump` with a new lease, `keep` (expired `enqueued`
        rows) with their lease and enqueued_at as they are; their assoc rows get `assoc`."""

    @abstractmethod
    def record_lost(self, attempts: Sequence[LostAttempt], *, now: datetime,
                    error: Mapping[str, str]) -> None:
        """Attempt rows, outcome `lost`, for attempts whose worker stopped heartbeating."""

    @abstractmethod
    def end(self, task_ids: list[int], target: TaskStatus, *, now: datetime,
            assoc: AssocChange, last_error: Mapping[str, str]) -> None:
        """Locked rows end in `target` (dropped by a gate, dead after a lost last attempt)."""

    @abstractmethod
    def retrigger(self, leases: Sequence[Lease], *, at: datetime) -> int:
        """Bring the trigger of `enqueued` tasks with a current lease forward to `at`."""

    # --- the workers ------------------------------------------------------------------------

    @contextlib.contextmanager
    def exclusive(self, key: str) -> Iterator[None]:
        """A transaction that no other `exclusive(key)` runs beside: what it reads stays true
        until it commits, for every writer that takes the same key first (a count, then a write
        that the count bounds). Here a lock of this server process, taken before the
        transaction opens: SQLite has one writer, and one process serves it."""
        with _EXCLUSIVE_LOCKS[zlib.crc32(key.encode()) % len(_EXCLUSIVE_LOCKS)], \
                shards.atomic():
            yield

    #: claim() and start() are one statement each: outside a transaction they need none of
    #: their own (the statement is atomic, and saves the BEGIN and COMMIT round trips).
    worker_steps_are_one_statement: bool = False

    @abstractmethod
    def claim(self, leases: Sequence[Lease], *, lambda_ids: list[int], worker: str,
              now: datetime, assoc: AssocChange) -> list[ClaimedTask]:
        """enqueued -> claimed, with a new lease, for tasks of `lambda_ids` whose lease is
        current; in id order."""

    @abstractmethod
    def start(self, leases: Sequence[Lease], assocs: Mapping[int, AssocChange], *,
              now: datetime) -> Starts:
        """claimed -> processing (one attempt more) where the lease is current and the gates of
        the task's lambda and collection are open at `now`. Where a gate is paused the task
        goes back to `new`, due at once (no attempt counted: the consumer leaves it while the
        gate stays paused); where one is dropped, the task ends `dropped`."""

    def claim_and_start(self, leases: Sequence[Lease], *, lambda_ids: list[int], worker: str,
                        now: datetime,
                        assocs: Mapping[int, AssocChange]) -> tuple[list[ClaimedTask], Starts]:
        """enqueued -> processing at once, for tasks that go straight to an idle executor: the
        claim's new lease and the start's attempt and gates, in one step (`assocs`: the
        processing assoc change of each lambda id). The started tasks (in id order), and what
        the gates did. Here a claim and then a start; a backend may do it in one statement."""
        claimed = self.claim(leases, lambda_ids=lambda_ids, worker=worker, now=now,
                             assoc=next(iter(assocs.values())))
        starts = self.start([Lease(task.task_id, task.lease) for task in claimed],
                            {task.task_id: assocs[directory.by_name(task.lambda_name).id]
                             for task in claimed}, now=now)
        return [task for task in claimed if task.task_id in starts.started], starts

    def held_rows(self, ids: Sequence[int], workers: Sequence[str]) -> list[tuple[Any, ...]]:
        """The rows of `ids` that one of `workers` claimed, as HELD_COLUMNS."""
        return list(TaskEntity.objects.filter(pk__in=ids, worker__in=workers)
                    .values_list(*HELD_COLUMNS))

    def held(self, worker: str, ending: Sequence[Lease], *, credential: str | None = None,
             worker_most: int | None = None, token_most: int | None = None,
             token_workers: Sequence[str] | None = None) -> tuple[int, int]:
        """Tasks held (claimed or processing) by `worker`, and by every worker `credential`
        registered (0 without one), once the `ending` ones (the worker's processing tasks at
        those leases) are taken off. A count may stop past `worker_most` (`token_most`) plus
        `len(ending)` tasks: a caller bounded by it learns that much is held, no more.
        `token_workers`: the ids of `credential`'s workers, where the caller read them (a
        shard's copy of the worker table is empty); default: this database's. Here the ORM's
        exact counts; a backend may stop where allowed."""
        from django.db.models import Count, Q

        from tasks_core.models import Worker

        mine = Q(worker=worker)
        counts = {"by_worker": Count("pk", filter=mine)}
        if credential is not None:
            counts["by_token"] = Count("pk")
        if ending:
            leases = Q()
            for lease in ending:
                leases |= Q(pk=lease.task_id, lease=lease.lease)
            counts["freed"] = Count("pk", filter=mine & Q(status=TaskStatus.PROCESSING) & leases)
        token = Worker.objects.filter(credential=credential).values("worker_id") \
            if token_workers is None else token_workers
        workers = Q(worker__in=token) if credential is not None else mine
        found = TaskEntity.objects.filter(workers, status__in=HELD).aggregate(**counts)
        freed = found.get("freed", 0)
        return found["by_worker"] - freed, max(0, found.get("by_token", 0) - freed)

    @abstractmethod
    def heartbeat(self, leases: Sequence[Lease], *, now: datetime,
                  assoc_for: Callable[[int], AssocChange]) -> set[int]:
        """Renew `processing` tasks whose lease is current (assoc from `assoc_for(lambda id)`);
        those ids."""

    @abstractmethod
    def release(self, leases: Sequence[Lease], *, now: datetime) -> int:
        """claimed -> new, due at once, where the lease is current; how many. A task claimed
        and started at once (`processing`) that its worker never ran goes back the same way,
        its attempt uncounted."""

    @abstractmethod
    def finish(self, endings: Sequence[Ending], *, now: datetime) -> dict[int, Written]:
        """processing -> each ending's status, with an attempt row, where the lease is current;
        {id: whether the task has children, and its group} for those written."""

    # --- users and operators ----------------------------------------------------------------

    @abstractmethod
    def requeue(self, task_ids: Collection[int], statuses: Collection[TaskStatus], *,
                now: datetime) -> list[int]:
        """Tasks in `statuses` go back to `new`, attempts reset, due now; their ids."""

    @abstractmethod
    def run_now(self, task_ids: Collection[int], *, now: datetime) -> int:
        """`new` and `retrying` tasks become due now; how many."""

    @abstractmethod
    def discard(self, task_ids: Collection[int], statuses: Collection[TaskStatus]) -> int:
        """Delete tasks in `statuses`; how many."""

    # --- chains -----------------------------------------------------------------------------

    @abstractmethod
    def children(self, parent_id: int) -> list[int]:
        """The ids of a task's children."""

    @abstractmethod
    def parent_statuses(self, child_id: int) -> list[TaskStatus]:
        """The statuses of all of a task's parents."""

    @abstractmethod
    def group_of(self, task_id: int) -> int | None:
        """The id of the group a task is a member of (None: none, or no such task)."""

    @abstractmethod
    def revive(self, child_id: int) -> bool:
        """cancelled -> waiting, for a child its parent's failure cancelled; whether it did."""
