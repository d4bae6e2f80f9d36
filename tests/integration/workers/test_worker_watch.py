"""The worker's watch over its own threads: a process short of executors leaves."""

from __future__ import annotations

import threading

import pytest

from tasks_core import lambda_sync, queues
from workers.transport import DirectTransport
from workers.worker import EXIT_EXECUTOR_LOST, WorkerProcess

pytestmark = [pytest.mark.django_db]


def test_a_worker_whose_executor_died_stops_with_a_non_zero_status(
        queue: queues.QueueBackend) -> None:
    # Given a worker of two executors, one of which has died
    lambda_sync.sync_to_store()
    worker = WorkerProcess(["demo.noop"], threads=2, transport=DirectTransport(queue))
    dead = threading.Thread(target=lambda: None)
    dead.start()
    dead.join()
    alive = threading.Event()
    living = threading.Thread(target=alive.wait)
    living.start()
    worker.executors = [living, dead]
    try:
        # When it watches itself, Then it asks to stop, with the status for its supervisor
        worker.watch()
        assert worker.exit_code == EXIT_EXECUTOR_LOST
        assert worker._stop.is_set()
    finally:
        alive.set()
        living.join()


def test_a_worker_with_all_its_executors_goes_on(queue: queues.QueueBackend) -> None:
    lambda_sync.sync_to_store()
    worker = WorkerProcess(["demo.noop"], threads=1, transport=DirectTransport(queue))
    alive = threading.Event()
    living = threading.Thread(target=alive.wait)
    living.start()
    worker.executors = [living]
    try:
        worker.watch()
        assert (worker.exit_code, worker._stop.is_set()) == (0, False)
    finally:
        alive.set()
        living.join()
