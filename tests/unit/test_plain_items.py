"""The plain-item shortcuts of the worker API answer exactly as their serializers, or not at
all."""

from __future__ import annotations

from typing import Any

import pytest

from tasks_api import worker_serializers as shapes

ERROR = {"type": "Boom", "message": " it broke\n", "traceback": "Traceback ...\n"}

#: Results a worker sends; the shortcut must take the first ones, and may leave the others.
PLAIN_RESULTS: list[dict[str, Any]] = [
    {"id": 1, "lease": 0, "outcome": "success"},
    {"id": 2, "lease": 7, "outcome": "success", "result": None, "error": None,
     "delay_s": None, "started_at": None},
    {"id": 3, "lease": 7, "outcome": "success", "result": {"a": [1, "x", {"b": None}]},
     "started_at": "2026-11-23T02:00:00.123456+00:00"},
    {"id": 4, "lease": 7, "outcome": "retry", "error": ERROR, "delay_s": 2,
     "started_at": "2026-11-23T03:00:00+02:00"},
    {"id": 5, "lease": 7, "outcome": "fatal", "error": ERROR, "result": "text"},
    {"id": 2**63 - 1, "lease": 2**63 - 1, "outcome": "success", "delay_s": 0.5},
]
OTHER_RESULTS: list[Any] = [
    {"id": 0, "lease": 7, "outcome": "success"},
    {"id": True, "lease": 7, "outcome": "success"},
    {"id": "5", "lease": 7, "outcome": "success"},
    {"id": 1, "lease": -1, "outcome": "success"},
    {"id": 1, "lease": 7, "outcome": "maybe"},
    {"id": 1, "lease": 7, "outcome": "success", "extra": 1},
    {"id": 1, "lease": 7, "outcome": "success", "result": "nul\x00"},
    {"id": 1, "lease": 7, "outcome": "success", "result": {"\ud800": 1}},
    {"id": 1, "lease": 7, "outcome": "retry", "error": {**ERROR, "type": " Boom "}},
    {"id": 1, "lease": 7, "outcome": "retry", "error": {"type": "Boom"}},
    {"id": 1, "lease": 7, "outcome": "retry", "delay_s": -1},
    {"id": 1, "lease": 7, "outcome": "retry", "delay_s": "2"},
    {"id": 1, "lease": 7, "outcome": "success", "started_at": "yesterday"},
    {"id": 1, "lease": 7, "outcome": "success", "started_at": ""},
    [1, 7], None,
]


def slow(serializer_class: type, item: Any) -> Any:
    form = serializer_class(data=item)
    return form.validated_data if form.is_valid() else None


def test_a_list_with_one_item_not_plain_gets_the_usual_errors() -> None:
    body = {"worker": "h:1:x", "results": [PLAIN_RESULTS[0], {**PLAIN_RESULTS[1], "lease": -1}]}
    form = shapes.FinishSerializer(data=body)
    assert not form.is_valid()
    assert form.errors == {"results": {1: {"lease": [
        "Ensure this value is greater than or equal to 0."]}}}
    plain = shapes.FinishSerializer(data={**body, "results": PLAIN_RESULTS})
    assert plain.is_valid(), plain.errors
    assert [e.task_id for e in plain.reported_ends()] == [item["id"] for item in PLAIN_RESULTS]


PLAIN_LEASES: list[Any] = [{"id": 1, "lease": 0}, {"id": 2**63 - 1, "lease": 5}]
OTHER_LEASES: list[Any] = [{"id": 0, "lease": 0}, {"id": 1}, {"id": 1, "lease": 1, "x": 1},
                           {"id": 1.0, "lease": 1}, {"id": 1, "lease": False}, "1"]
#: Each shortcut and the serializer whose answer it gives.
SHORTCUTS = {"result": (shapes._plain_result, shapes.ResultSerializer),
             "lease": (shapes._plain_lease, shapes.LeaseSerializer)}


def cases(**items: list[Any]) -> list[tuple[str, Any]]:
    return [(kind, item) for kind, listed in items.items() for item in listed]


@pytest.mark.parametrize(("kind", "item"), cases(
    result=PLAIN_RESULTS, lease=PLAIN_LEASES))
def test_a_plain_item_is_taken_as_its_serializer_takes_it(kind: str, item: Any) -> None:
    plain, serializer_class = SHORTCUTS[kind]
    taken = plain(item)
    assert taken is not None
    assert taken == slow(serializer_class, item)


@pytest.mark.parametrize(("kind", "item"), cases(
    result=OTHER_RESULTS, lease=OTHER_LEASES))
def test_any_other_item_is_left_to_its_serializer(kind: str, item: Any) -> None:
    plain, _serializer_class = SHORTCUTS[kind]
    assert plain(item) is None
