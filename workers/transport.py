"""How a worker reaches ATF: the seam between the worker's threads and the task store.

The controller, executors, heartbeat and batch writers are the same above every transport:
`DirectTransport` talks to the store and the queues itself (a host inside the store's trust
domain); `workers.http_transport.HttpTransport` asks the ATF API (a host with a worker token and
no store credentials). One transport serves one worker process; its methods are called from
several threads.
"""

from __future__ import annotations

import abc
import contextlib
import enum
import functools
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from django.db import DatabaseError, InterfaceError, OperationalError
from django.utils import timezone

from tasks_core import directory, queues, store, tracing, worker_registry
from tasks_core.claiming import Claimer
from tasks_core.conf import atf_settings
from tasks_core.context import TaskLink
from tasks_core.exceptions import AtfError, LambdaNotFound
from tasks_core.states import TaskStatus
from workers import db
from workers.store_connections import StoreConnections

logger = logging.getLogger(__name__)

_R = TypeVar("_R")

#: An attempt that ended: the claimed task and what it ended with.
FinishedAttempt = tuple[store.ClaimedTask, store.Result]


class Unreached(enum.Enum):
    """The answer about a result whose shard could not be reached: not written; the worker
    writes it again when the shard is back (workers.results)."""

    UNREACHED = "unreached"


UNREACHED = Unreached.UNREACHED
#: What a write answers per attempt: its task's new status, None (its lease moved on: the
#: result was refused), or UNREACHED.
Written = TaskStatus | None | Unreached


class TransportUnavailable(AtfError):
    """ATF cannot be reached (the task store, or the ATF API)."""


@dataclass(frozen=True, kw_only=True)
class WorkerInfo:
    """What a worker process tells ATF about itself."""

    worker_id: str
    host: str
    pid: int
    lambdas: tuple[str, ...]
    threads: int


@dataclass(frozen=True, kw_only=True)
class Beat:
    """What a heartbeat learnt about running tasks."""

    lost: set[int]  #: their lease moved on: their result will be refused
    cancel: set[int] = field(default_factory=set)  #: a cancel asks the worker to stop them
    #: their shard could not be reached: neither renewed nor lost (the others were renewed)
    unreached: set[int] = field(default_factory=set)


class Transport(abc.ABC):
    """A worker's way to ATF. `register` comes first; the rest act for the registered worker.

    Writes that fail for a reason that may pass (a lost connection, a server restarting) raise
    TransportUnavailable; the caller retries or counts a failed heartbeat.
    """

    #: Longest wait of one `claim` while no task is ready, so a stop request is noticed.
    claim_wait_s: float = 1.0
    #: Whether a claim may carry results (`finish_and_claim`); an older API takes none.
    carries_results: bool = True

    #: What a running task reads and writes beside its result (parent results, steps)
    #: through this transport (tasks_core.context.TaskLink); None: the store itself.
    task_link: TaskLink | None = None

    def __init__(self) -> None:
        self.worker: WorkerInfo | None = None

    @abc.abstractmethod
    def heartbeat_timeouts_s(self, lambda_names: Sequence[str]) -> dict[str, float]:
        """The heartbeat timeout in seconds of each lambda this worker may run; names it may
        not run (unknown to ATF, or another team's) are left out."""

    def register(self, worker: WorkerInfo) -> None:
        """Announce the worker (its registry row) before it takes any task."""
        self.worker = worker

    @abc.abstractmethod
    def claim(self, max_count: int) -> list[store.ClaimedTask]:
        """Up to `max_count` tasks of the worker's lambdas, claimed and started in one step
        (enqueued -> processing: they go straight to idle executors, and only those returned
        may run); [] after `claim_wait_s`."""

    @abc.abstractmethod
    def finish_and_claim(self, done: Sequence[FinishedAttempt], max_count: int,
                         ) -> tuple[list[Written], list[store.ClaimedTask]]:
        """Record attempts' ends as `finish_many` does and claim up to `max_count` tasks as
        `claim` does, in one call and one commit, without waiting for work (the results'
        statuses are not held back): per result its status, and the tasks claimed."""

    @abc.abstractmethod
    def heartbeat(self, leases: Mapping[int, int], *, seen: bool = True) -> Beat:
        """Renew running tasks' leases (and, when `seen`, the worker's last_seen); the ids
        whose lease was lost, and those a cancel asks to stop."""

    @abc.abstractmethod
    def finish_many(self, done: Sequence[FinishedAttempt]) -> list[Written]:
        """Record attempts' ends; per task its new status, None when its lease was lost, or
        UNREACHED when its shard could not be reached (the others were recorded)."""

    @abc.abstractmethod
    def release(self, tasks: Sequence[store.ClaimedTask]) -> int:
        """Hand back claimed tasks whose lambda never ran; how many were still this worker's."""

    @abc.abstractmethod
    def deregister(self) -> None:
        """Mark the worker stopped in the registry."""

    def reset(self) -> None:  # noqa: B027 - a transport without connections has nothing to drop
        """Drop the calling thread's connection: after a failure, so the next call opens a
        fresh one, or when the thread is done with it."""

    def let_go(self) -> None:  # noqa: B027 - a transport without connections has nothing to close
        """Close the connections the worker's threads share: the worker has stopped."""

    def close(self) -> None:  # noqa: B027 - a transport without connections has nothing to close
        """Release every connection."""


@contextlib.contextmanager
def _store_errors() -> Iterator[None]:
    try:
        yield
    except DatabaseError as exc:
        raise TransportUnavailable(f"the task store failed: {exc}") from exc


def _marked(done: Sequence[FinishedAttempt], statuses: Sequence[TaskStatus | None],
            unreached: set[int]) -> list[Written]:
    """`statuses` with UNREACHED for the results whose shard could not be reached."""
    if not unreached:
        return list(statuses)
    return [UNREACHED if task.task_id in unreached else status
            for (task, _result), status in zip(done, statuses, strict=True)]


def _on_lent_connections(method: Callable[..., _R]) -> Callable[..., _R]:
    """The method's queries run on connections borrowed from the worker's pools
    (workers.store_connections), given back when it returns."""

    @functools.wraps(method)
    def lent(self: DirectTransport, *args: Any, **kwargs: Any) -> _R:
        with self.connections.lent():
            return method(self, *args, **kwargs)

    return lent


class DirectTransport(Transport):
    """The store and the queues, reached by this process itself; its threads share a few
    connections to each database (ATF_WORKER_DB_CONNECTIONS)."""

    def __init__(self, queue: queues.QueueBackend) -> None:
        super().__init__()
        self.queue = queue
        self.claimer: Claimer | None = None
        self.connections = StoreConnections(atf_settings.worker_db_connections)

    @_on_lent_connections
    def heartbeat_timeouts_s(self, lambda_names: Sequence[str]) -> dict[str, float]:
        timeouts_s = {}
        for name in lambda_names:
            with contextlib.suppress(LambdaNotFound):
                timeouts_s[name] = directory.by_name(name).heartbeat_timeout_s
        return timeouts_s

    @_on_lent_connections
    def register(self, worker: WorkerInfo) -> None:
        super().register(worker)
        self.claimer = Claimer(
            queue=self.queue, worker_id=worker.worker_id,
            lambda_ids={name: directory.by_name(name).id for name in worker.lambdas},
            priorities=atf_settings.priorities, start=True,
        )
        worker_registry.register(worker_id=worker.worker_id, host=worker.host, pid=worker.pid,
                                 lambda_names=worker.lambdas, threads=worker.threads,
                                 now=timezone.now())

    @_on_lent_connections
    def claim(self, max_count: int) -> list[store.ClaimedTask]:
        assert self.claimer is not None, "register() comes first"
        with _store_errors():
            # the messages of a shard that cannot be reached are left to it (claimer.claim)
            claimed = self.claimer.take(max_count, wait_s=self.claim_wait_s, unreached=set())
            return tracing.with_context(claimed) if tracing.ENABLED else claimed

    @_on_lent_connections
    def finish_and_claim(self, done: Sequence[FinishedAttempt], max_count: int,
                         ) -> tuple[list[Written], list[store.ClaimedTask]]:
        assert self.claimer is not None, "register() comes first"
        unreached: set[int] = set()
        with _store_errors():
            statuses, claimed = self.claimer.finish_and_take(done, max_count,
                                                             unreached=unreached)
            return (_marked(done, statuses, unreached),
                    tracing.with_context(claimed) if tracing.ENABLED else claimed)

    @_on_lent_connections
    def heartbeat(self, leases: Mapping[int, int], *, seen: bool = True) -> Beat:
        # A broken connection (a terminated backend, a failover) gets one immediate retry on a
        # fresh one, so it does not count as a failed heartbeat.
        with _store_errors():
            try:
                return self._heartbeat(leases, seen=seen)
            except (InterfaceError, OperationalError):
                self.reset()
                return self._heartbeat(leases, seen=seen)

    def _heartbeat(self, leases: Mapping[int, int], *, seen: bool) -> Beat:
        # A shard that cannot be reached costs only its own tasks: the others are renewed
        now = timezone.now()
        unreached: set[int] = set()
        lost = store.heartbeat(leases, now=now, unreached=unreached)
        if seen and self.worker is not None:
            worker_registry.seen(self.worker.worker_id, now=now)
        cancel = store.stop_requested(set(leases) - lost - unreached, unreached)
        return Beat(lost=lost, cancel=cancel, unreached=unreached)

    @_on_lent_connections
    def finish_many(self, done: Sequence[FinishedAttempt]) -> list[Written]:
        unreached: set[int] = set()
        with _store_errors():
            statuses = store.finish_many(done, now=timezone.now(), unreached=unreached)
        return _marked(done, statuses, unreached)

    @_on_lent_connections
    def release(self, tasks: Sequence[store.ClaimedTask]) -> int:
        with _store_errors():
            # a shard that cannot be reached gets its tasks back after their timeouts
            return store.release(tasks, now=timezone.now(), unreached=set()) if tasks else 0

    @_on_lent_connections
    def deregister(self) -> None:
        if self.worker is not None:
            with _store_errors():
                worker_registry.stopped(self.worker.worker_id, now=timezone.now())

    def reset(self) -> None:
        db.reset_connection()
        self.connections.check()

    def let_go(self) -> None:
        self.connections.close()

    def close(self) -> None:
        self.queue.close()
        self.connections.close()
