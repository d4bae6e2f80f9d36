"""run_lambda: whatever a lambda raises becomes its attempt's outcome, never the executor's."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tasks_core import registry
from tasks_core.context import TaskContext, TimeLimitExceeded
from tasks_core.store import ClaimedTask, Outcome
from workers.executor import run_lambda

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
