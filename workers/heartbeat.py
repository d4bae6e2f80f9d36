"""The heartbeat thread: renews the leases of running tasks and the worker's `last_seen`.

A failed heartbeat is tried again within a second, on a fresh connection; after three
intervals without a successful one (failures, or a write that hangs), the process ends at once
and a fresh image of it takes over (workers.replacement). heartbeat_timeout is checked at start to
exceed three intervals, so no task is enqueued again while this process could still run it.

With a sharded store the budget is per shard too: a heartbeat that reaches some shards and not
another renews the tasks of those it reaches, and the worker stops the unreached shard's tasks
after two intervals without reaching it (WorkerProcess.watch), ending the process only if one
of them is still running at three.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from tasks_core import shards, store
from tasks_core.heartbeat_rule import MAX_FAILED_HEARTBEATS
from workers import db, replacement
from workers.buffer import WorkBuffer
from workers.transport import Beat, Transport

logger = logging.getLogger(__name__)

#: Exit status of a worker process that cut itself off from its tasks.
EXIT_CUT_OFF = 75
#: Seconds from the start of a failed heartbeat to the next try (at most one interval): a
#: restarting API or database is tried every second until the budget of three intervals ends.
RETRY_S = 1.0
#: Longest wait of a lambda's thread in one C call while its own heartbeat is written: an
#: interrupt (time limit, cancel) is raised only between Python bytecodes.
INTERRUPTIBLE_WAIT_S = 0.05


def cut_off(reason: str) -> None:
    """End this process's image at once (its lambdas with it): its leases can no longer be
    trusted. A fresh image takes over once ATF answers again (workers.replacement)."""
    logger.critical("%s: ending the worker process's lambdas so no task can run twice at once",
                    reason, extra={"action": "worker_cut_off"})
    replacement.end_process(reason, EXIT_CUT_OFF)


class HeartbeatThread(threading.Thread):
    def __init__(self, *, buffer: WorkBuffer, interval_s: float, transport: Transport) -> None:
        super().__init__(name="HeartbeatThread", daemon=True)
        self.buffer = buffer
        self.interval_s = interval_s
        self.transport = transport
        self.failures = 0
        self.last_ok_s = time.monotonic()
        #: Shards (by slot) the latest heartbeat could not reach while it reached the others:
        #: when a heartbeat last reached each (its start, monotonic). Replaced, never changed.
        self.unreached_since: dict[int, float] = {}
        self._stopped = threading.Event()
        # A lambda's own heartbeat is written here, never on the lambda's thread: a time limit
        # or a cancel raised into that thread in the middle of the write would leave its
        # database connection inside an unfinished transaction.
        self._lambda_beats = ThreadPoolExecutor(max_workers=1, thread_name_prefix="LambdaBeat")

    def run(self) -> None:
        try:
            self._beat_until_stopped()
        finally:
            db.reset_connection()  # a thread that ends lets go of its connection

    def _beat_until_stopped(self) -> None:
        wait_s = self.interval_s
        while not self._stopped.wait(wait_s):
            tried_s = time.monotonic()
            # The next heartbeat is due an interval after this one BEGAN, and a try after a
            # failure RETRY_S after it began: a call that hung until its timeout (one interval)
            # goes again at once, on a fresh connection. The budget counts from the start of
            # the last successful heartbeat: one due an interval after the previous one ended
            # lost that answer's time from the budget (with answers of 0.3-0.4 s and a 0.5 s
            # interval, a remote worker's retry after a slow answer had 0.1-0.2 s left), and
            # waiting RETRY_S after a failure put the retry at the end of the budget whenever an
            # interval was a second or less.
            due_s = self.interval_s if self.beat() else min(RETRY_S, self.interval_s)
            wait_s = max(0.0, due_s - (time.monotonic() - tried_s))

    def beat(self) -> bool:
        """Renew every running task's lease; mark the ones whose lease was lost. False if the
        heartbeat failed (it is tried again within a second, on a fresh connection)."""
        # The deadline counts from before the write: the store's trigger counts from `now`.
        started_s = time.monotonic()
        try:
            beat = self.transport.heartbeat(self.buffer.leases())
        except Exception as exc:  # noqa: BLE001 - any failure counts; the budget ends us
            self.failures += 1
            logger.warning("heartbeat failed (%d in a row, %.1fs since the last one): %s",
                           self.failures, self.silent_for_s(), exc)
            self.transport.reset()
            if self.silent_for_s() > MAX_FAILED_HEARTBEATS * self.interval_s:
                cut_off(f"no successful heartbeat for {self.silent_for_s():.1f}s "
                        f"({self.failures} failed)")
            return False
        self.failures = 0
        previous_s, self.last_ok_s = self.last_ok_s, started_s
        self._heard(beat)
        return self._reached(beat.unreached, previous_s)

    def _reached(self, unreached: set[int], previous_s: float) -> bool:
        """Note the shards this heartbeat could not reach (the others' leases were renewed):
        a shard newly unreached was last reached by the previous heartbeat, which began at
        `previous_s`. Whether it reached every shard (if not, it is tried again within a
        second, as a failed one is)."""
        slots = {shards.slot_of(task_id) for task_id in unreached}
        if slots - self.unreached_since.keys():
            logger.warning("heartbeat could not reach shard slot(s) %s: their tasks stop if "
                           "it lasts %.0fs; the other shards' go on",
                           ", ".join(map(str, sorted(slots - self.unreached_since.keys()))),
                           (MAX_FAILED_HEARTBEATS - 1) * self.interval_s,
                           extra={"action": "heartbeat_shard_unreached"})
        self.unreached_since = {slot: self.unreached_since.get(slot, previous_s)
                                for slot in slots}
        return not slots

    def unreached_for_s(self) -> dict[int, float]:
        """Per shard slot the latest heartbeat could not reach: seconds since one reached it."""
        now_s = time.monotonic()
        return {slot: now_s - since_s for slot, since_s in self.unreached_since.items()}

    def _heard(self, beat: Beat) -> None:
        for task in self.buffer.mark_lost(beat.lost):
            logger.error("task %d lost its lease while running; its result will be discarded",
                         task.task_id, extra={"action": "lease_lost", "task_id": task.task_id})
        for task in self.buffer.request_cancel(beat.cancel):
            logger.info("task %d: a cancel asks to stop it", task.task_id,
                        extra={"action": "cancel_heard", "task_id": task.task_id})

    def beat_one(self, task: store.ClaimedTask) -> bool:
        """A lambda's own `ctx.heartbeat()`: renew one lease now; False if it was lost or a
        cancel asks to stop the task. The lambda's thread only waits for the write, in short
        waits, so a time limit or a cancel reaches it at once and leaves the write whole."""
        try:
            written = self._lambda_beats.submit(self._beat_one, task)
        except RuntimeError:  # the worker has stopped heartbeating: the lease will lapse
            return False
        while True:
            try:
                return written.result(timeout=INTERRUPTIBLE_WAIT_S)
            except FutureTimeout:
                continue

    def _beat_one(self, task: store.ClaimedTask) -> bool:
        beat = self.transport.heartbeat({task.task_id: task.lease}, seen=False)
        self._heard(beat)
        return not beat.lost and not beat.cancel

    def silent_for_s(self) -> float:
        """Seconds since the last successful heartbeat."""
        return time.monotonic() - self.last_ok_s

    def stop(self) -> None:
        self._stopped.set()
        with contextlib.suppress(RuntimeError):  # already shut down
            # Its last job: the pool's thread lets go of its connection before it ends.
            self._lambda_beats.submit(db.reset_connection)
        self._lambda_beats.shutdown(wait=False)
