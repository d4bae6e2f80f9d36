"""run_lambda: whatever a lambda raises becomes its attempt's outcome, never the executor's;
and an executor takes its next task only once its last result is durable."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator

import pytest

from tasks_core import registry
from tasks_core.context import TaskContext, TimeLimitExceeded
from tasks_core.states import TaskStatus
from tasks_core.store import ClaimedTask, Outcome
from tests.conftest import wait_for
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
    """Whether `thread` is blocked in concurrent.futures.wait (an executor waiting for its last
    result to be durable)."""
    frame = sys._current_frames().get(thread.ident or 0)
    while frame is not None:
        if frame.f_code.co_name == "wait" and "concurrent" in frame.f_code.co_filename:
            return True
        frame = frame.f_back
    return False


def test_an_executor_takes_no_task_before_its_last_result_is_durable(
        raising: list[BaseException]) -> None:
    # Given a one-executor buffer holding two tasks, and a result writer whose write hangs
    raising.append(ValueError("its result is a retry; any outcome will do"))
    buffer = WorkBuffer(priorities=["default"], executors=1)
    first, second = (ClaimedTask(task_id=n, lease=1, lambda_name=NAME, collection="default",
                                 priority="default", payload={}, attempt=1, max_attempts=3,
                                 timeout_s=None, heartbeat_timeout_s=30.0) for n in (1, 2))
    buffer.put([first, second])
    released, written = threading.Event(), []

    def hanging_write(items: list) -> list:
        released.wait(10)
        written.extend(task.task_id for task, _result in items)
        return [TaskStatus.RETRYING] * len(items)

    results = BatchWriterThread(name="writer", write=hanging_write, reset=lambda: None)
    executor = ExecutorThread(index=0, buffer=buffer, heartbeat=None,  # type: ignore[arg-type]
                              worker_id="w1", results=results, tally=Tally())
    results.start()
    executor.start()
    try:
        # When the first task's lambda has returned and its result's write hangs
        wait_for(lambda: _waiting_for_a_result(executor), timeout_s=10,
                 message="the executor to wait for its result")
        # Then the second task is still in the buffer, whose leases the heartbeat renews
        assert 2 in buffer.leases()
        # ...and it runs once the first result is durable
        released.set()
        wait_for(lambda: written == [1, 2], timeout_s=10, message="both results written")
    finally:
        released.set()
        buffer.close()
        results.stop()
        executor.join(5)
        results.join(5)
