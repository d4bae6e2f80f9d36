"""TaskRequest is the one shape of "schedule this": every way in maps onto its fields."""

from __future__ import annotations

import dataclasses

import pytest

from atf_client import Call
from tasks_api.serializers import ScheduleTaskSerializer
from tasks_core import atf, operations, scheduling
from tasks_core.access import Scope
from tasks_core.exceptions import InvalidTask
from tasks_core.models import TaskEntity
from tasks_core.scheduling import TaskRequest
from tests.factories import LambdaFactory, TaskFactory

pytestmark = pytest.mark.django_db


def test_the_api_and_the_client_name_the_fields_of_a_task_request() -> None:
    json_names = scheduling.json_field_names()
    assert list(ScheduleTaskSerializer().get_fields()) == json_names
    client_names = [f.name for f in dataclasses.fields(Call)]
    assert client_names == [f.name for f in dataclasses.fields(TaskRequest) if f.name != "_"]


def test_a_misspelt_option_is_a_type_error_naming_it() -> None:
    with pytest.raises(TypeError, match="dealy"):
        atf.schedule("demo.noop", dealy=5)  # type: ignore[call-arg]


def test_from_json_reads_a_body_into_the_typed_request() -> None:
    request = TaskRequest.from_json({
        "lambda": " demo.noop ", "payload": {"n": 1}, "priority": "high", "delay": 5,
        "run_at": None, "after": [3, 4], "timeout": 2.5})
    assert request == TaskRequest("demo.noop", {"n": 1}, priority="high", delay=5,
                                  after=(3, 4), timeout=2.5)
    at = TaskRequest.from_json({"lambda": "demo.noop", "run_at": "2030-01-02T03:04:05Z"})
    assert at.run_at is not None and at.run_at.isoformat() == "2030-01-02T03:04:05+00:00"


@pytest.mark.parametrize(("body", "fields"), [
    ({"lambda": "demo.noop", "colection": "x"}, {"colection"}),
    ({"payload": {}}, {"lambda"}),
    ({"lambda": "demo.noop", "run_at": "tomorrow"}, {"run_at"}),
    ({"lambda": "demo.noop", "after": "1,2"}, {"after"}),
    ({"lambda": "demo.noop", "after": [1, True]}, {"after"}),
])
def test_from_json_names_what_it_cannot_read(body: dict, fields: set[str]) -> None:
    with pytest.raises(InvalidTask) as caught:
        TaskRequest.from_json(body)
    assert fields <= set(caught.value.errors)


def test_from_json_refuses_what_is_not_an_object() -> None:
    with pytest.raises(InvalidTask) as caught:
        TaskRequest.from_json(["demo.noop"])
    assert list(caught.value.errors) == ["non_field_errors"]


def test_scheduling_goes_through_the_actors_scope() -> None:
    mine, theirs = LambdaFactory(), LambdaFactory()
    scope = Scope(frozenset({mine.team_id}))
    parent = TaskFactory(lambda_ref=theirs)
    # Another team's lambda is an unknown one; another team's task is an unknown parent
    with pytest.raises(InvalidTask) as refused:
        operations.schedule(scope, TaskRequest(theirs.name))
    assert refused.value.errors == {"lambda": [f"Unknown lambda {theirs.name!r}."]}
    with pytest.raises(InvalidTask) as caught:
        operations.schedule_many(scope, [TaskRequest(mine.name, after=[parent.pk])])
    assert caught.value.errors == {"after": [f"Unknown parent task(s): {parent.pk}."]}
    assert not TaskEntity.objects.filter(lambda_ref=mine).exists()
    # ...while the team's own lambda is scheduled
    task, created = operations.schedule(scope, TaskRequest(mine.name, {"n": 1}))
    assert created and task.lambda_ref_id == mine.pk
