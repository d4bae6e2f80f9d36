"""serializers.show_task and serializers.validated: one shared serializer, the same answers."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from rest_framework.exceptions import ValidationError

from tasks_api import serializers
from tasks_core import scheduling
from tests.integration.tasks_api.test_api_support import member

pytestmark = pytest.mark.django_db

BODIES: list[Any] = [
    {"lambda": "alpha.work", "payload": {"n": 1}},
    {"lambda": "alpha.work", "priority": "high", "delay": 5, "after": [1, 2]},
    {"lambda": "alpha.work", "run_at": "2030-01-02T03:04:05+02:00", "timeout": 2.5},
    {"lambda": "alpha.work", "delay": -1, "max_attempts": 0, "oops": 1},  # invalid
    {"payload": {}},  # invalid: no lambda
    None, [], "text",  # invalid: not an object
]


def fresh(body: Any) -> tuple[str, Any]:
    form = serializers.ScheduleTaskSerializer(data=body)
    return ("ok", form.validated_data) if form.is_valid() else ("error", form.errors)


def shared(body: Any) -> tuple[str, Any]:
    try:
        return "ok", serializers.validated(serializers.ScheduleTaskSerializer, body)
    except ValidationError as exc:
        return "error", exc.detail


def test_validated_answers_as_a_serializer_of_its_own_even_from_many_threads() -> None:
    member("alpha")
    expected = [fresh(body) for body in BODIES]
    assert [kind for kind, _ in expected] == ["ok"] * 3 + ["error"] * 5
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(shared, BODIES * 20))
    assert got == expected * 20


def test_show_task_answers_as_task_serializer_even_from_many_threads() -> None:
    alice = member("alpha")
    tasks = [scheduling.schedule(
                 scheduling.TaskRequest(alice.lam.name, {"n": n}, priority=priority))[0]
             for n, priority in enumerate(["high", "default", "low"])]
    for task in tasks:  # shown without reading links, so the threads need no connection
        setattr(task, serializers.NEW_PARENTS, [])
    expected = [serializers.TaskSerializer(task).data for task in tasks]
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(serializers.show_task, tasks * 20))
    assert got == expected * 20
    assert [shown["payload"] for shown in got[:3]] == [{"n": 0}, {"n": 1}, {"n": 2}]
