"""The result writer and the claims that carry its waiting results.

A result goes either with a controller's claim (one commit for the result and the next task)
or through the writer; never both, never neither, and its future is settled once either way.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future

import pytest

from tasks_core.states import TaskStatus
from tasks_core.store import ClaimedTask, Outcome, Result
from workers import batching
from workers.batching import BatchWriterThread
from workers.buffer import WorkBuffer
from workers.controller import ControllerThread
from workers.results import Tally, recorded
from workers.transport import UNREACHED, FinishedAttempt, TransportUnavailable, Written

CONTROLLER = object()


class Recorder:
    """A write function that records each batch and answers each item with "w:<item>"."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.wrote = threading.Event()

    def __call__(self, items: list[str]) -> list[str]:
        self.batches.append(list(items))
        self.wrote.set()
        return [f"w:{item}" for item in items]


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def writer(recorder: Recorder) -> Iterator[BatchWriterThread[str, str]]:
    """A result writer whose first result a controller's claim carries; started after that
    (a started writer would take the result first: it writes what arrives while nothing is
    carried)."""
    thread: BatchWriterThread[str, str] = BatchWriterThread(name="TestWriter", write=recorder,
                                                            reset=lambda: None)
    thread.submit(["first"])
    (carried,) = thread.carry(CONTROLLER)
    thread.start()
    yield thread
    BatchWriterThread.settle([carried], ["c:first"])
    thread.stop()
    thread.join(5)


def settled(futures: Sequence[Future[list[str]]]) -> list[str]:
    """The outcomes of the runs handed over, in order."""
    return [outcome for future in futures for outcome in future.result(timeout=5)]


def test_what_arrives_while_a_claim_carries_results_is_left_to_its_next_claim(
        writer: BatchWriterThread[str, str], recorder: Recorder) -> None:
    # Given a controller whose claim in flight carries results
    # When results arrive meanwhile
    second, third = writer.submit(["b"]), writer.submit(["c"])
    # Then the writer leaves them to that controller's next claim
    assert not recorder.wrote.wait(0.3)
    taken = writer.carry(CONTROLLER)
    assert BatchWriterThread.items(taken) == ["b", "c"]
    BatchWriterThread.settle(taken, ["c:b", "c:c"])
    assert settled([second, third]) == ["c:b", "c:c"]
    # ...and once a claim finds nothing to carry, the writer writes what arrives, at once
    assert writer.carry(CONTROLLER) == []
    assert settled([writer.submit(["d"])]) == ["w:d"]
    assert recorder.batches == [["d"]]


def test_once_no_claim_carries_results_the_writer_writes_what_waits(
        writer: BatchWriterThread[str, str], recorder: Recorder) -> None:
    waiting = writer.submit(["b"])
    # When the controller claims no more for a while (no free executor, or a stop)
    writer.drop_carrier(CONTROLLER)
    # Then the writer writes what waited for it
    assert settled([waiting]) == ["w:b"]


def test_a_batch_whose_claim_failed_is_written_by_the_writer(
        writer: BatchWriterThread[str, str], recorder: Recorder) -> None:
    waiting = writer.submit(["b"])
    taken = writer.carry(CONTROLLER)
    writer.give_back(CONTROLLER, taken)
    assert settled([waiting]) == ["w:b"]


def test_a_stop_writes_what_waits_even_for_a_carrier(
        writer: BatchWriterThread[str, str], recorder: Recorder) -> None:
    waiting = writer.submit(["b"])
    writer.stop()
    assert settled([waiting]) == ["w:b"]


def test_a_write_waits_for_a_controller_about_to_claim_for_a_free_executor_only(
        recorder: Recorder) -> None:
    free = [1]
    writer: BatchWriterThread[str, str] = BatchWriterThread(
        name="TestWriter", write=recorder, reset=lambda: None, free_slots=lambda: free[0])
    writer.start()
    try:
        # Given a controller waiting for a free executor, and one free (it is waking up)
        writer.await_slot(CONTROLLER)
        # When a result arrives, Then the writer leaves it to that controller's claim
        waiting = writer.submit(["a"])
        assert not recorder.wrote.wait(0.3)
        # ...but once no executor is free (another claim took it), the writer writes it
        free[0] = 0
        assert settled([waiting]) == ["w:a"]
    finally:
        writer.stop()
        writer.join(5)


TASK = ClaimedTask(task_id=7, lease=1, lambda_name="demo.noop", collection="default",
                   priority="default", payload={}, attempt=1, max_attempts=3, timeout_s=None,
                   heartbeat_timeout_s=30.0)


class FakeTransport:
    """Claims nothing; records the results its claims carry, or fails them."""

    claim_wait_s = 0.05
    carries_results = True

    def __init__(self, *, fail: bool = False) -> None:
        self.fail = fail
        self.carried: list[object] = []

    def claim(self, max_count: int) -> list[ClaimedTask]:
        return []

    def finish_and_claim(self, done: Sequence[object],
                         max_count: int) -> tuple[list[str], list[ClaimedTask]]:
        if self.fail:
            raise TransportUnavailable("the store is away")
        self.carried += done
        return ["carried"] * len(done), [TASK]

    def release(self, tasks: Sequence[ClaimedTask]) -> int:
        return len(tasks)

    def reset(self) -> None:
        pass


@pytest.mark.parametrize("fail", [False, True])
def test_a_controller_claims_with_the_waiting_results_and_settles_them(
        recorder: Recorder, fail: bool) -> None:
    # Given a result waiting in a writer that has not started, and a free executor
    writer: BatchWriterThread = BatchWriterThread(name="TestWriter", write=recorder,
                                                  reset=lambda: None)
    future = writer.submit(["a"])
    buffer = WorkBuffer(priorities=["default"], executors=1)
    transport = FakeTransport(fail=fail)
    controller = ControllerThread(buffer=buffer, transport=transport,  # type: ignore[arg-type]
                                  results=writer)
    # When the controller claims once
    if fail:
        with pytest.raises(TransportUnavailable):
            controller.claim_once()
    else:
        controller.claim_once()
    writer.start()
    try:
        if fail:
            # Then a failed claim gives the result back, and the writer writes it
            assert future.result(timeout=5) == ["w:a"]
            assert buffer.free_slots() == 1
        else:
            # Then the claim carried it and settled its future, and its task is buffered
            assert future.result(timeout=5) == ["carried"]
            assert transport.carried == ["a"]
            assert buffer.take(timeout_s=1) == TASK
            assert recorder.batches == []
    finally:
        writer.stop()
        writer.join(5)


def test_results_whose_shard_is_down_are_parked_and_written_once_it_answers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(batching, "PARK_S", 0.2)
    # Given a writer whose store answers UNREACHED for task 2 until its shard is back
    back = threading.Event()
    writes: list[list[int]] = []

    def write(items: list[FinishedAttempt]) -> list[Written]:
        writes.append([task.task_id for task, _result in items])
        return [TaskStatus.SUCCESS if task.task_id != 2 or back.is_set() else UNREACHED
                for task, _result in items]

    writer: BatchWriterThread[FinishedAttempt, Written] = BatchWriterThread(
        name="TestWriter", write=write, reset=lambda: None)
    writer.start()
    buffer = WorkBuffer(priorities=["default"], executors=2)
    buffer.put([claimed(1), claimed(2)])
    finished = []
    for _n in range(2):
        task = buffer.take(timeout_s=0)
        buffer.begin(task, 0.0, thread_id=0)
        buffer.finishing(task)
        finished.append((task, Result(outcome=Outcome.SUCCESS)))
    # When both results are handed over together
    handed = writer.submit(finished)
    handed.add_done_callback(functools.partial(recorded, buffer, Tally(), finished,
                                               writer=writer))
    # Then their run is settled at once (its executor moves on), task 1 is done with, and
    # task 2 stays in the buffer, heartbeated, its result tried again and again
    assert handed.result(timeout=5) == [TaskStatus.SUCCESS, UNREACHED]
    assert buffer.leases() == {2: 1}
    time.sleep(0.5)
    assert writes[0] == [1, 2] and writes[1:] and all(ids == [2] for ids in writes[1:])
    # And once its shard answers, it is written and done with
    back.set()
    deadline = time.monotonic() + 5
    while buffer.leases() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert buffer.leases() == {}
    writer.stop()
    writer.join(5)


def claimed(task_id: int) -> ClaimedTask:
    return ClaimedTask(task_id=task_id, lease=1, lambda_name="demo.noop", collection="default",
                       priority="default", payload={}, attempt=1, max_attempts=3, timeout_s=None,
                       heartbeat_timeout_s=30.0)
