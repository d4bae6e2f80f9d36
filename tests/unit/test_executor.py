"""run_lambda: whatever a lambda raises becomes its attempt's outcome, never the executor's;
an executor runs the waiting tasks in runs, hands a run's results over together, and takes its
next task only once they are durable."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator

import pytest

from tasks_core import registry
from tasks_core.context import TaskContext, TimeLimitExceeded
from tasks_core.states import TaskStatus
from tasks_core.store import ClaimedTask, Outcome
from tests.conftest import wait_for
from workers import executor as executor_module
from workers.batching import BatchWriterThread
from workers.buffer import WorkBuffer
from workers.executor import ExecutorThread, run_lambda
from workers.results import Tally

NAME = "tests.raises"


@pytest.fixture
def raising() -> Iterator[list[BaseException]]:
    """A lambda that raises the exception put in the list it yields."""
    to_raise: list[BaseException] = []

    @registry.register(NAME)
    def raises(ctx: TaskContext, payload: object) -> None:
        raise to_raise[0]

    yield to_raise
    registry.unregister(NAME)


def run(exc: BaseException, to_raise: list[BaseException]) -> object:
    to_raise.append(exc)
    task = ClaimedTask(task_id=1, lease=1, lambda_name=NAME, collection="default",
                       priority="default", payload={}, attempt=1, max_attempts=3,
                       timeout_s=None, heartbeat_timeout_s=30.0)
    ctx = TaskContext(task_id=1, attempt=1, collection="default", priority="default",
                      lambda_name=NAME)
    return run_lambda(task, ctx, worker="w1")


@pytest.mark.parametrize("exc", [SystemExit(3), KeyboardInterrupt(), GeneratorExit(),
                                 ValueError("bad")])
def test_any_exception_fails_the_attempt_with_its_class_and_traceback(
        exc: BaseException, raising: list[BaseException]) -> None:
    result = run(exc, raising)
    assert result.outcome is Outcome.RETRY
    assert result.error["type"] == type(exc).__name__
    assert result.error["traceback"].startswith("Traceback")
    assert type(exc).__name__ in result.error["traceback"].splitlines()[-1]


def test_an_interrupt_of_the_time_limit_ends_the_attempt_timeout(
        raising: list[BaseException]) -> None:
    result = run(TimeLimitExceeded(), raising)
    assert (result.outcome, result.error["type"]) == (Outcome.TIMEOUT, "TimeLimitExceeded")


def _waiting_for_a_result(thread: threading.Thread) -> bool:
    """Whether `thread` is an executor waiting for its last results to be durable."""
    frame = sys._current_frames().get(thread.ident or 0)
    while frame is not None:
        if frame.f_code.co_name == "_wait_until_durable":
            return True
        frame = frame.f_back
    return False


def _task(task_id: int, lambda_name: str = NAME) -> ClaimedTask:
    return ClaimedTask(task_id=task_id, lease=1, lambda_name=lambda_name, collection="default",
                       priority="default", payload={}, attempt=1, max_attempts=3,
                       timeout_s=None, heartbeat_timeout_s=30.0)


class Writes:
    """A result writer's write that records each batch's task ids; it hangs until released."""

    def __init__(self) -> None:
        self.released = threading.Event()
        self.batches: list[list[int]] = []

    def __call__(self, items: list) -> list:
        self.released.wait(10)
        self.batches.append([task.task_id for task, _result in items])
        return [TaskStatus.RETRYING] * len(items)

    def written(self) -> list[int]:
        return [task_id for batch in self.batches for task_id in batch]


@contextlib.contextmanager
def executor_over(buffer: WorkBuffer, writes: Writes) -> Iterator[ExecutorThread]:
    """One executor thread over `buffer`, its results written by `writes`."""
    results = BatchWriterThread(name="writer", write=writes, reset=lambda: None)
    executor = ExecutorThread(index=0, buffer=buffer, heartbeat=None,  # type: ignore[arg-type]
                              worker_id="w1", results=results, tally=Tally())
    results.start()
    executor.start()
    try:
        yield executor
    finally:
        writes.released.set()
        buffer.close()
        results.stop()
        executor.join(5)
        results.join(5)


def test_an_executor_takes_no_task_before_its_last_results_are_durable(
        raising: list[BaseException]) -> None:
    # Given a one-executor buffer and a result writer whose write hangs
    raising.append(ValueError("its result is a retry; any outcome will do"))
    buffer = WorkBuffer(priorities=["default"], executors=1)
    buffer.put([_task(1)])
    writes = Writes()
    with executor_over(buffer, writes) as executor:
        # When the first task's lambda has returned and its result's write hangs
        wait_for(lambda: _waiting_for_a_result(executor), timeout_s=10,
                 message="the executor to wait for its result")
        # Then a task that arrives meanwhile waits in the buffer, whose leases the heartbeat
        # renews (only the first task has begun)
        buffer.put([_task(2)])
        assert 2 in buffer.leases()
        assert buffer.running_count() == 1
        # ...and it runs once the first result is durable
        writes.released.set()
        wait_for(lambda: writes.written() == [1, 2], timeout_s=10,
                 message="both results written")


@pytest.mark.parametrize(("run_max_s", "batches"), [(60.0, [[1, 2, 3]]),
                                                     (0.0, [[1], [2], [3]])])
def test_an_executor_runs_the_waiting_tasks_and_hands_their_results_over_together(
        raising: list[BaseException], monkeypatch: pytest.MonkeyPatch, run_max_s: float,
        batches: list[list[int]]) -> None:
    # Given three tasks waiting for a one-executor buffer
    monkeypatch.setattr(executor_module, "RUN_MAX_S", run_max_s)
    raising.append(ValueError("its result is a retry; any outcome will do"))
    buffer = WorkBuffer(priorities=["default"], executors=1)
    buffer.put([_task(1), _task(2), _task(3)])
    writes = Writes()
    writes.released.set()
    # When its executor runs them
    with executor_over(buffer, writes):
        wait_for(lambda: writes.written() == [1, 2, 3], timeout_s=10,
                 message="the three results written")
    # Then it ran them in one run, handed over at once; or, once a run's time is spent, one
    # run each
    assert writes.batches == batches


def test_a_stop_during_a_run_hands_back_its_waiting_tasks_and_writes_what_ran() -> None:
    # Given three tasks waiting, the first of which closes the buffer (the worker's stop)
    buffer = WorkBuffer(priorities=["default"], executors=1)
    handed_back: list[ClaimedTask] = []

    @registry.register("tests.stops")
    def stops(ctx: TaskContext, payload: object) -> None:
        handed_back.extend(buffer.close())

    try:
        buffer.put([_task(1, "tests.stops"), _task(2), _task(3)])
        writes = Writes()
        writes.released.set()
        # When its executor runs the first
        with executor_over(buffer, writes) as executor:
            wait_for(lambda: writes.written() == [1], timeout_s=10,
                     message="the first result written")
            executor.join(5)
        # Then the others were handed back unrun, and the executor ended
        assert [task.task_id for task in handed_back] == [2, 3]
        assert not executor.is_alive()
        assert writes.batches == [[1]]
    finally:
        registry.unregister("tests.stops")
