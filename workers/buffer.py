"""The worker process's shared state: claimed tasks waiting per priority, and running tasks.

The controller fills the buffer only up to the executors' free capacity, so a worker never
hoards tasks another worker could run, and what it claims goes straight to an idle executor:
a buffered task is already started in the store (claimed and started in one step). From its
claim until its end is durable (the result writer, or a claim that carried the result, has
committed it), a task is covered by the heartbeat: waiting here, running, or finished with its
result still being written.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone

from tasks_core import shards
from tasks_core.context import AttemptStopped, ShardUnreachable, TaskCancelled, TimeLimitExceeded
from tasks_core.store import ClaimedTask
from workers import interrupts


@dataclass(kw_only=True)
class Running:
    task: ClaimedTask
    thread_id: int  #: the executor thread running it
    started_s: float  #: monotonic
    started_at: datetime
    lost: bool = False  #: a heartbeat found the lease gone: the result must not be recorded
    #: the lambda returned: its executor has moved on, and its result is being written
    finishing: bool = False
    stopped_s: float | None = None  #: when the worker stopped it (monotonic)
    #: why: TimeLimitExceeded (past its time limit), TaskCancelled (a cancel asked) or
    #: ShardUnreachable (its lease could not be renewed: WorkBuffer.stop_shard)
    stopped_by: type[AttemptStopped] | None = None
    cancel_requested: bool = False  #: a heartbeat heard that a cancel asks to stop it

    @property
    def deadline_s(self) -> float | None:
        timeout_s = self.task.timeout_s
        return None if timeout_s is None else self.started_s + timeout_s

    @property
    def discard(self) -> bool:
        """Whether nothing of the lambda's own outcome may be recorded."""
        return self.lost or self.stopped_s is not None


class WorkBuffer:
    def __init__(self, *, priorities: Sequence[str], executors: int) -> None:
        self.priorities = list(priorities)
        self.executors = executors
        self._lock = threading.Lock()
        # Two conditions on the one lock, so a new task wakes one executor, not every thread.
        self._work_waiting = threading.Condition(self._lock)  #: executors wait on it
        self._slot_free = threading.Condition(self._lock)  #: the controller waits on it
        self._waiting: dict[str, deque[ClaimedTask]] = {p: deque() for p in self.priorities}
        self._running: dict[int, Running] = {}
        self._held = 0  #: tasks taken by an executor whose lambda has not returned yet
        self._reserved = 0  #: slots a claim in flight is claiming tasks for
        self.closed = False

    # --- the controller's side -------------------------------------------------------------

    def free_slots(self) -> int:
        """Executors that would have no task to run next if the buffer were handed out now.

        An executor whose lambda has returned is free: its result is written behind it.
        """
        with self._lock:
            return self._free()

    def reserve(self) -> int:
        """Take every free slot for one claim (another controller's claim then leaves them
        alone); `put` gives them back with the tasks claimed."""
        with self._lock:
            free = 0 if self.closed else self._free()
            self._reserved += free
            return free

    def wait_for_free_slot(self, timeout_s: float) -> None:
        with self._lock:
            self._slot_free.wait_for(lambda: self.closed or self._free() > 0, timeout=timeout_s)

    def put(self, tasks: Sequence[ClaimedTask], *, reserved: int = 0) -> list[ClaimedTask]:
        """Buffer claimed tasks (the claim had `reserved` slots, now given back); once
        closed, refuse them all and return them."""
        with self._lock:
            self._reserved -= reserved
            if reserved > len(tasks):
                self._slot_free.notify()
            if self.closed:
                return list(tasks)
            for task in tasks:
                self._waiting.setdefault(task.priority, deque()).append(task)
            self._work_waiting.notify(len(tasks))
            return []

    # --- the executors' side ---------------------------------------------------------------

    def take(self, timeout_s: float) -> ClaimedTask | None:
        """The next task, highest priority first; None after `timeout_s` or once closed."""
        with self._lock:
            self._work_waiting.wait_for(lambda: self.closed or self._buffered() > 0,
                                        timeout=timeout_s)
            return self._next()

    def take_waiting(self) -> ClaimedTask | None:
        """The next task if one is waiting, without waiting for one (an executor's run)."""
        with self._lock:
            return self._next()

    def begin(self, task: ClaimedTask, started_s: float, thread_id: int,
              started_at: datetime | None = None) -> Running:
        with self._lock:
            running = self._running[task.task_id] = Running(
                task=task, thread_id=thread_id, started_s=started_s,
                started_at=started_at or timezone.now()
            )
            return running

    def finishing(self, task: ClaimedTask) -> Running:
        """The lambda returned: stop heartbeating the task, and withdraw a time-limit interrupt
        not raised yet. Its `discard` tells whether its outcome must go unrecorded. Calling it
        again (an interrupt raised on the way here) changes nothing more."""
        with self._lock:
            running = self._running[task.task_id]
            if running.stopped_s is not None:
                # First: after this no interrupt can arrive (stop_due() holds this lock and
                # interrupts a task once), so the changes below cannot be cut in half.
                interrupts.cancel(running.thread_id)
            if not running.finishing:
                running.finishing = True
                self._held -= 1
                self._slot_free.notify()
            return running

    def end(self, task: ClaimedTask) -> None:
        """`task` is done with: its end is durable (or will not be written), or it never ran."""
        with self._lock:
            running = self._running.pop(task.task_id, None)
            if running is None or not running.finishing:
                self._held -= 1
                self._slot_free.notify()

    # --- the heartbeat's side --------------------------------------------------------------

    def leases(self) -> dict[int, int]:
        """The tasks the heartbeat renews: waiting, running, and finished ones whose result is
        not durable yet; not the ones a time limit or cancel stopped (their end is recorded at
        once)."""
        with self._lock:
            leases = {task.task_id: task.lease for queue in self._waiting.values()
                      for task in queue}
            leases.update({pk: running.task.lease for pk, running in self._running.items()
                           if running.stopped_s is None})
            return leases

    def mark_lost(self, task_ids: set[int]) -> list[ClaimedTask]:
        """Tasks whose lease moved on: running ones get their outcome discarded, waiting ones
        are dropped unrun; the tasks newly marked. A finished one is left alone (its result
        may have been written just before the heartbeat, or it is refused by its write)."""
        with self._lock:
            lost = [self._running[pk] for pk in task_ids
                    if pk in self._running and not self._running[pk].discard
                    and not self._running[pk].finishing]
            for running in lost:
                running.lost = True
            dropped = []
            for queue in self._waiting.values():
                dropped += [task for task in queue if task.task_id in task_ids]
                kept = [task for task in queue if task.task_id not in task_ids]
                queue.clear()
                queue.extend(kept)
            if dropped:
                self._slot_free.notify()
            return [running.task for running in lost] + dropped

    def request_cancel(self, task_ids: set[int]) -> list[ClaimedTask]:
        """Mark running tasks a cancel asks to stop (the main thread stops them); the tasks
        newly marked."""
        with self._lock:
            asked = [self._running[pk] for pk in task_ids
                     if pk in self._running and not self._running[pk].cancel_requested
                     and not self._running[pk].finishing and self._running[pk].stopped_s is None]
            for running in asked:
                running.cancel_requested = True
            return [running.task for running in asked]

    def cancel_requested(self, task_id: int) -> bool:
        with self._lock:
            running = self._running.get(task_id)
            return running is not None and running.cancel_requested

    def running_count(self) -> int:
        with self._lock:
            return len(self._running)

    # --- the stops' side (time limits, cancels) ----------------------------------------------

    def stop_due(self, now_s: float) -> list[Running]:
        """Tasks whose lambda is still running past their deadline, or that a cancel asked to
        stop: from now on they are not heartbeated and their lambda's outcome is discarded,
        and their executor thread is interrupted (under the lock, so never once the lambda
        has returned) with the reason, TimeLimitExceeded or TaskCancelled."""
        with self._lock:
            stopped = []
            for running in self._running.values():
                if running.finishing or running.stopped_s is not None:
                    continue
                if running.cancel_requested:
                    running.stopped_by = TaskCancelled
                elif running.deadline_s is not None and running.deadline_s <= now_s:
                    running.stopped_by = TimeLimitExceeded
                else:
                    continue
                running.stopped_s = now_s
                interrupts.interrupt(running.thread_id, running.stopped_by)
                stopped.append(running)
            return stopped

    def stop_shard(self, slot: int, now_s: float) -> tuple[list[Running], list[ClaimedTask]]:
        """The tasks of shard `slot` (one the heartbeat could not reach for too long): running
        ones are stopped as `stop_due` stops them (reason ShardUnreachable; nothing of theirs
        is recorded), waiting ones are dropped unrun. Both, those newly stopped."""
        with self._lock:
            stopped = []
            for running in self._running.values():
                if running.finishing or running.stopped_s is not None \
                        or shards.slot_of(running.task.task_id) != slot:
                    continue
                running.stopped_by, running.stopped_s = ShardUnreachable, now_s
                interrupts.interrupt(running.thread_id, ShardUnreachable)
                stopped.append(running)
            dropped = [task for queue in self._waiting.values() for task in queue
                       if shards.slot_of(task.task_id) == slot]
            for queue in self._waiting.values():
                kept = [task for task in queue if shards.slot_of(task.task_id) != slot]
                queue.clear()
                queue.extend(kept)
            if dropped:
                self._slot_free.notify()
            return stopped, dropped

    def running_on(self, slot: int) -> list[Running]:
        """Tasks of shard `slot` whose lambda has not returned (stopped or not)."""
        with self._lock:
            return [running for running in self._running.values()
                    if not running.finishing and shards.slot_of(running.task.task_id) == slot]

    def hung(self, now_s: float, grace_s: float) -> list[Running]:
        """Stopped tasks whose lambda has not returned `grace_s` after its interrupt."""
        with self._lock:
            return [running for running in self._running.values()
                    if not running.finishing and running.stopped_s is not None
                    and now_s - running.stopped_s >= grace_s]

    # --- shutdown --------------------------------------------------------------------------

    def close(self) -> list[ClaimedTask]:
        """Stop handing out tasks; return the buffered ones, whose lambda never ran."""
        with self._lock:
            self.closed = True
            unstarted = [task for queue in self._waiting.values() for task in queue]
            for queue in self._waiting.values():
                queue.clear()
            self._work_waiting.notify_all()
            self._slot_free.notify_all()
            return unstarted

    def _next(self) -> ClaimedTask | None:
        for queue in self._waiting.values():
            if queue:
                self._held += 1
                return queue.popleft()
        return None

    def _free(self) -> int:
        return self.executors - self._held - self._buffered() - self._reserved

    def _buffered(self) -> int:
        return sum(len(queue) for queue in self._waiting.values())
