"""`atf.get(task_id)`: a task's outcome read from Python, on the handle `schedule()` returns."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from tasks_core import atf, registry
from tasks_core.models import TaskEntity
from tests.factories import LambdaFactory, TaskFactory
from workers.testing import TaskOutcome

pytestmark = pytest.mark.django_db

DOUBLE = "tests.reader.double"


def double(ctx: atf.TaskContext, payload: Any) -> dict:
    return {"twice": payload["n"] * 2}


@pytest.fixture
def double_lambda(redis_client: redis.Redis) -> Iterator[None]:
    registry.register(DOUBLE, team="reading")(double)
    yield
    registry.unregister(DOUBLE)


def test_get_reads_a_scheduled_task_and_its_outcome_once_it_ran(
        double_lambda: None, run_due_tasks: Callable[..., list[TaskOutcome]]) -> None:
    # Given a task scheduled with atf.schedule() and read back by its id
    scheduled = atf.schedule(DOUBLE, {"n": 21})
    read = atf.get(scheduled.id)
    # Then the reader hands back the same kind of handle, not finished yet
    assert isinstance(scheduled, TaskEntity) and isinstance(read, TaskEntity)
    assert (read.lambda_name, read.status, read.result, read.is_finished) == (
        DOUBLE, "new", None, False)
    # When the task runs
    run_due_tasks(lambdas=[DOUBLE])
    # Then refresh() brings the handle up to date, and a new read agrees
    assert scheduled.refresh() is scheduled
    assert (scheduled.status, scheduled.result, scheduled.is_finished) == (
        "success", {"twice": 42}, True)
    assert (atf.get(scheduled.id).status, atf.get(scheduled.id).result) == (
        "success", {"twice": 42})


def test_get_reads_a_task_of_any_team() -> None:
    theirs = TaskFactory(lambda_ref=LambdaFactory(name="other.job", team__name="other"))
    assert atf.get(theirs.pk).lambda_name == "other.job"


def test_an_unknown_id_is_task_not_found_a_lookup_error() -> None:
    with pytest.raises(atf.TaskNotFound, match="no task 987654"):
        atf.get(987654)
    assert issubclass(atf.TaskNotFound, LookupError)


@pytest.mark.parametrize(("status", "finished"), [
    ("enqueued", False), ("retrying", False), ("fatal_failure", True), ("dead", True),
    ("cancelled", True), ("dropped", True)])
def test_is_finished_holds_for_the_final_statuses_only(status: str, finished: bool) -> None:
    assert TaskFactory(status=status).is_finished is finished
