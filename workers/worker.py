"""One worker process: a controller, executor threads and a heartbeat, around one buffer.

The main thread waits for a stop request and watches the heartbeat: three intervals without
a successful one and the process terminates itself (the heartbeat thread may be the one stuck).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Sequence

from django.conf import settings
from django.utils import timezone

from tasks_core import directory, queues, store
from tasks_core.exceptions import ConfigurationError
from tasks_core.models import Worker
from workers.buffer import WorkBuffer
from workers.controller import POP_WAIT_S, ControllerThread
from workers.executor import ExecutorThread, result_writer, start_writer
from workers.heartbeat import (
    MAX_FAILED_HEARTBEATS,
    HeartbeatThread,
    cut_off,
    outlasts_heartbeats,
)
from workers.results import Tally

logger = logging.getLogger(__name__)

#: Seconds between two summary lines at INFO.
SUMMARY_INTERVAL_S = 10.0
#: How often the main thread checks the heartbeat and the stop request.
WATCH_INTERVAL_S = 0.1


def check_heartbeat_timeouts(lambda_names: Sequence[str], interval_s: float) -> None:
    """Raise ConfigurationError unless every lambda's heartbeat timeout exceeds three intervals."""
    for name in lambda_names:
        timeout_s = directory.by_name(name).heartbeat_timeout_s
        if not outlasts_heartbeats(timeout_s, interval_s):
            raise ConfigurationError(
                f"lambda {name}: heartbeat_timeout {timeout_s}s must exceed "
                f"{MAX_FAILED_HEARTBEATS} x ATF_HEARTBEAT_INTERVAL_S ({interval_s}s)"
            )


class WorkerProcess:
    def __init__(self, lambda_names: Sequence[str], *, threads: int,
                 queue: queues.QueueBackend) -> None:
        self.lambda_names = list(lambda_names)
        self.interval_s = settings.ATF_HEARTBEAT_INTERVAL_S
        check_heartbeat_timeouts(self.lambda_names, self.interval_s)
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.buffer = WorkBuffer(priorities=settings.ATF_PRIORITIES, executors=threads)
        self.tally = Tally()
        self.starts = start_writer()
        self.results = result_writer()
        self.heartbeat = HeartbeatThread(buffer=self.buffer, interval_s=self.interval_s,
                                         worker_id=self.worker_id)
        self.controller = ControllerThread(
            buffer=self.buffer, queue=queue, worker_id=self.worker_id,
            lambda_ids={name: directory.by_name(name).id for name in self.lambda_names},
            priorities=settings.ATF_PRIORITIES,
        )
        self.executors = [
            ExecutorThread(index=i, buffer=self.buffer, heartbeat=self.heartbeat,
                           worker_id=self.worker_id, starts=self.starts,
                           results=self.results, tally=self.tally)
            for i in range(threads)
        ]
        self._stop = threading.Event()

    def run(self) -> None:
        """Work until stop() is called, then shut down gracefully."""
        now = timezone.now()
        Worker.objects.create(worker_id=self.worker_id, host=socket.gethostname(),
                              pid=os.getpid(), lambdas=self.lambda_names,
                              threads=len(self.executors), started_at=now, last_seen=now)
        logger.info("worker %s started: %d thread(s) for %s", self.worker_id,
                    len(self.executors), ", ".join(self.lambda_names))
        for thread in (self.heartbeat, self.starts, self.results, self.controller,
                       *self.executors):
            thread.start()
        summarised_s = time.monotonic()
        while not self._stop.wait(WATCH_INTERVAL_S):
            self.watch()
            if time.monotonic() - summarised_s >= SUMMARY_INTERVAL_S:
                self._summarise(time.monotonic() - summarised_s)
                summarised_s = time.monotonic()
        self.shutdown()

    def watch(self) -> None:
        """Terminate the process if the heartbeat has been silent for three intervals."""
        silent_s = self.heartbeat.silent_for_s()
        if silent_s > MAX_FAILED_HEARTBEATS * self.interval_s:
            cut_off(f"no successful heartbeat for {silent_s:.1f}s")

    def _summarise(self, elapsed_s: float) -> None:
        counts = self.tally.take()
        if counts:
            logger.info("last %.0fs: %d task(s) finished %s", elapsed_s, sum(counts.values()),
                        dict(counts))

    def stop(self) -> None:
        self._stop.set()

    def shutdown(self) -> None:
        """Stop taking work, hand back buffered tasks, let running ones finish within the grace."""
        self.controller.stop()
        self.controller.join(POP_WAIT_S + 5)
        unstarted = self.buffer.close()
        released = store.release(unstarted, now=timezone.now()) if unstarted else 0
        running = self.buffer.running_count()
        logger.info("worker stopping: handed back %d buffered task(s), waiting for %d running",
                    released, running)
        deadline = time.monotonic() + settings.ATF_SHUTDOWN_GRACE_S
        for thread in self.executors:
            while thread.is_alive() and time.monotonic() < deadline:
                thread.join(WATCH_INTERVAL_S)
                self.watch()
        if abandoned := self.buffer.running_count():
            logger.warning("grace period over: %d task(s) still running will be retried after "
                           "their heartbeat timeout", abandoned)
        for writer in (self.starts, self.results):
            writer.stop()
            writer.join(max(deadline - time.monotonic(), 0) + 5)
        self.heartbeat.stop()
        Worker.objects.filter(worker_id=self.worker_id).update(stopped_at=timezone.now())
        self._summarise(0)
        logger.info("worker %s stopped", self.worker_id)
