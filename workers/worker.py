"""One worker process: a controller, executor threads and a heartbeat, around one buffer.

The main thread waits for a stop request and watches: three heartbeat intervals without a
successful heartbeat and the process terminates itself (the heartbeat thread may be the one
stuck); one shard of a sharded store that heartbeats cannot reach costs only its own tasks
(`_spare_shard`); tasks past their time limit are timed out; a lambda that does not stop within the
grace after that ends the process, which a fresh image of itself replaces (under
`runworker --processes N`, it exits for its supervisor to restart); an executor thread that
died makes it exit non-zero for its supervisor (systemd, Kubernetes) to start a fresh one.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Mapping, Sequence

from tasks_core.conf import atf_settings
from tasks_core.exceptions import AtfError, ConfigurationError
from tasks_core.heartbeat_rule import MAX_FAILED_HEARTBEATS, outlasts_heartbeats
from tasks_core.store import ClaimedTask
from workers import replacement
from workers.async_executor import AsyncExecutor, async_lambdas
from workers.buffer import WorkBuffer
from workers.controller import ControllerThread, claims_outage
from workers.executor import ExecutorThread, result_writer
from workers.heartbeat import HeartbeatThread, cut_off
from workers.results import Tally
from workers.time_limits import AttemptStops
from workers.transport import Transport, WorkerInfo

logger = logging.getLogger(__name__)

#: Seconds between two summary lines at INFO.
SUMMARY_INTERVAL_S = 10.0
#: How often the main thread checks the heartbeat, the time limits and the stop request.
WATCH_INTERVAL_S = 0.1
#: Exit status of a worker process whose lambda did not stop after its time limit.
EXIT_HUNG = 76
#: Exit status of a worker process that has fewer live executor threads than it was started with.
EXIT_EXECUTOR_LOST = 77
#: Controller threads, so a claim is in flight while another one's tasks are handed out: the
#: executors then wait for the faster of two claims, not for one claim after another.
CONTROLLERS = 2
#: Seconds an abandoning process gives its result writer to record finished attempts.
ABANDON_FLUSH_S = 1.0


def check_heartbeat_timeouts(timeouts_s: Mapping[str, float], interval_s: float) -> None:
    """Raise ConfigurationError unless every lambda's heartbeat timeout exceeds three intervals."""
    for name, timeout_s in timeouts_s.items():
        if not outlasts_heartbeats(timeout_s, interval_s):
            raise ConfigurationError(
                f"lambda {name}: heartbeat_timeout {timeout_s}s must exceed "
                f"{MAX_FAILED_HEARTBEATS} x ATF_HEARTBEAT_INTERVAL_S ({interval_s}s)"
            )


class WorkerProcess:
    def __init__(self, lambda_names: Sequence[str], *, threads: int,
                 transport: Transport, async_slots: int | None = None) -> None:
        self.lambda_names = list(lambda_names)
        self.transport = transport
        self.interval_s = atf_settings.heartbeat_interval_s
        timeouts_s = transport.heartbeat_timeouts_s(self.lambda_names)
        if missing := [name for name in self.lambda_names if name not in timeouts_s]:
            raise ConfigurationError(f"lambda(s) unknown to ATF, or not this worker token's "
                                     f"team's: {', '.join(missing)}")
        check_heartbeat_timeouts(timeouts_s, self.interval_s)
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        # Async lambdas run on the process's event loop (workers.async_executor). A process of
        # async lambdas only runs `async_slots` tasks at once; one with sync lambdas too runs
        # as many as it has threads, whichever kind they are: a claim cannot choose the kind
        # of its tasks, so more would leave sync tasks waiting in the buffer for a thread.
        async_names = async_lambdas(self.lambda_names)
        only_async = bool(async_names) and async_names >= set(self.lambda_names)
        #: Tasks the process runs at once (its buffer's slots).
        self.capacity = ((atf_settings.worker_async_slots if async_slots is None else async_slots)
                         if only_async else threads)
        self.buffer = WorkBuffer(priorities=atf_settings.priorities, executors=self.capacity)
        self.tally = Tally()
        self.results = result_writer(transport, self.buffer)
        self.heartbeat = HeartbeatThread(buffer=self.buffer, interval_s=self.interval_s,
                                         transport=transport)
        claims = claims_outage()
        self.controllers = [ControllerThread(buffer=self.buffer, transport=transport,
                                             results=self.results, index=i, outage=claims)
                            for i in range(CONTROLLERS)]
        self.async_lane = AsyncExecutor(
            lambda_names=async_names, buffer=self.buffer, worker_id=self.worker_id,
            results=self.results, tally=self.tally) if async_names else None
        self.executors = [
            ExecutorThread(index=i, buffer=self.buffer, heartbeat=self.heartbeat,
                           worker_id=self.worker_id, results=self.results, tally=self.tally,
                           task_link=transport.task_link, async_lane=self.async_lane)
            for i in range(threads)
        ]
        self.time_limits = AttemptStops(buffer=self.buffer, results=self.results,
                                      worker_id=self.worker_id, tally=self.tally,
                                      grace_s=atf_settings.timeout_grace_s)
        self.exit_code = 0
        self._stop = threading.Event()

    @property
    def lambda_threads(self) -> list[threading.Thread]:
        """The threads that run lambdas: the executors, and the async lambdas' event loop."""
        return [*self.executors, *([self.async_lane.thread] if self.async_lane else [])]

    def run(self) -> int:
        """Work until stop() is called, then shut down gracefully; the exit status.

        The calling thread registers, hands back and deregisters the worker on a connection of
        its own, which it lets go of at the end, as the worker's other threads do theirs: a
        worker run in a thread of a longer-lived process (a test's) leaves no connection open.
        """
        try:
            return self._work()
        finally:
            self.transport.reset()
            self.transport.let_go()

    def _work(self) -> int:
        self.transport.register(WorkerInfo(
            worker_id=self.worker_id, host=socket.gethostname(), pid=os.getpid(),
            lambdas=tuple(self.lambda_names), threads=self.capacity,
        ))
        # The line's start is what operators' scripts and the docs know; the event loop's
        # slots come after it, only where the process has one
        logger.info("worker %s started: %d thread(s) for %s%s", self.worker_id,
                    len(self.executors), ", ".join(self.lambda_names),
                    f"; {self.capacity} task(s) at once on its event loop"
                    if self.async_lane else "")
        for thread in (self.heartbeat, self.results, *self.controllers,
                       *self.lambda_threads):
            thread.start()
        summarised_s = time.monotonic()
        while not self._stop.wait(WATCH_INTERVAL_S):
            self.watch()
            if time.monotonic() - summarised_s >= SUMMARY_INTERVAL_S:
                self._summarise(time.monotonic() - summarised_s)
                summarised_s = time.monotonic()
        self.shutdown()
        return self.exit_code

    def watch(self) -> None:
        """Terminate the process if the heartbeat has been silent for three intervals; end
        attempts past their time limit, and leave if a lambda hangs or an executor died."""
        silent_s = self.heartbeat.silent_for_s()
        if silent_s > MAX_FAILED_HEARTBEATS * self.interval_s:
            cut_off(f"no successful heartbeat for {silent_s:.1f}s")
        for slot, unreached_s in self.heartbeat.unreached_for_s().items():
            self._spare_shard(slot, unreached_s)
        if hung := self.time_limits.enforce(time.monotonic()):
            self.abandon(f"the lambda of task(s) {', '.join(str(r.task.task_id) for r in hung)} "
                         f"did not stop within {self.time_limits.grace_s:g}s of its time limit or "
                         f"cancel")
        alive = sum(thread.is_alive() for thread in self.lambda_threads)
        if alive < len(self.lambda_threads) and not self._stop.is_set():
            logger.critical("%d of %d executor threads died; stopping so that a fresh process "
                            "takes over", len(self.lambda_threads) - alive,
                            len(self.lambda_threads),
                            extra={"action": "worker_executor_lost"})
            self.exit_code = EXIT_EXECUTOR_LOST
            self.stop()

    def _spare_shard(self, slot: int, unreached_s: float) -> None:
        """The heartbeat budget of one shard (the others are reached): after two intervals
        without reaching it, its tasks are stopped (running ones interrupted, waiting ones
        dropped) and the others go on; at three, if one of its lambdas still runs, the
        process ends, as it would without shards, before that shard could give the task to
        another worker."""
        if unreached_s <= (MAX_FAILED_HEARTBEATS - 1) * self.interval_s:
            return
        stopped, dropped = self.buffer.stop_shard(slot, time.monotonic())
        if stopped or dropped:
            logger.warning("shard slot %d unreachable for %.1fs: stopped %d running task(s), "
                           "dropped %d waiting; they run again once it is back", slot,
                           unreached_s, len(stopped), len(dropped),
                           extra={"action": "shard_tasks_stopped", "shard_slot": slot})
        if unreached_s > MAX_FAILED_HEARTBEATS * self.interval_s and \
                (running := self.buffer.running_on(slot)):
            cut_off(f"shard slot {slot} unreachable for {unreached_s:.1f}s and the lambda of "
                    f"task(s) {', '.join(str(r.task.task_id) for r in running)} did not stop")

    def abandon(self, reason: str) -> None:
        """Hand back the buffered tasks and end the process at once (a fresh image replaces it,
        or it exits with EXIT_HUNG under a supervisor): a thread that ignores its interrupt can
        be stopped only with its process, before its task's retry is due. Finished attempts
        get a moment to be recorded; tasks still running elsewhere in this process are retried
        after their heartbeat timeout."""
        logger.critical("%s: handing back buffered tasks and ending the process", reason,
                        extra={"action": "worker_hung"})
        for controller in self.controllers:
            controller.stop()
        released = self._hand_back(self.buffer.close())
        self.results.stop()
        self.results.join(ABANDON_FLUSH_S)
        try:
            self.transport.deregister()
        except AtfError as exc:
            logger.warning("could not mark the worker stopped: %s", exc)
        logger.critical("handed back %d buffered task(s)", released)
        replacement.end_process(reason, EXIT_HUNG)

    def _summarise(self, elapsed_s: float) -> None:
        counts = self.tally.take()
        if counts:
            logger.info("last %.0fs: %d task(s) finished %s", elapsed_s, sum(counts.values()),
                        dict(counts))

    def stop(self) -> None:
        self._stop.set()

    def shutdown(self) -> None:
        """Stop taking work, hand back buffered tasks, let running ones finish within the grace."""
        # The buffer closes first: a claim still in flight (a remote worker's long poll) hands
        # back what it gets instead of buffering it.
        for controller in self.controllers:
            controller.stop()
        released = self._hand_back(self.buffer.close())
        running = self.buffer.running_count()
        logger.info("worker stopping: handed back %d buffered task(s), waiting for %d running",
                    released, running)
        deadline = time.monotonic() + atf_settings.shutdown_grace_s
        for thread in self.lambda_threads:
            while thread.is_alive() and time.monotonic() < deadline:
                thread.join(WATCH_INTERVAL_S)
                self.watch()
        for controller in self.controllers:
            controller.join(self.transport.claim_wait_s + 5)
        if abandoned := self.buffer.running_count():
            logger.warning("grace period over: %d task(s) still running will be retried after "
                           "their heartbeat timeout", abandoned)
        # The results not written yet are flushed while the heartbeat still covers their tasks.
        self.results.stop()
        self.results.join(max(deadline - time.monotonic(), 0) + 5)
        self.heartbeat.stop()
        try:
            self.transport.deregister()
        except AtfError as exc:
            logger.warning("could not mark the worker stopped: %s", exc)
        self._summarise(0)
        logger.info("worker %s stopped", self.worker_id)

    def _hand_back(self, unstarted: Sequence[ClaimedTask]) -> int:
        """Release buffered tasks; if ATF cannot be reached they come back after the claim
        timeout instead."""
        try:
            return self.transport.release(unstarted) if unstarted else 0
        except AtfError as exc:
            logger.warning("could not hand back %d buffered task(s), they run again after the "
                           "claim timeout: %s", len(unstarted), exc)
            return 0
