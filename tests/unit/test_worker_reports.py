"""The one reading of what a remote worker reports (tasks_core.remote_workers: LEASES, RESULTS):
what it takes, and each refusal with the message the worker API answers (DRF's fields gave
these before; the API answers them unchanged)."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest

from tasks_api import worker_serializers as shapes
from tasks_core import limits, remote_workers
from tasks_core.exceptions import InvalidShape
from tasks_core.remote_workers import LEASES, RESULTS, ReportedEnd

ERROR = {"type": "Boom", "message": " it broke\n", "traceback": "Traceback ...\n"}
DONE = {"id": 1, "lease": 7, "outcome": "success"}


def end(item: dict[str, Any]) -> ReportedEnd:
    ends: list[ReportedEnd] = RESULTS.read([item])
    return ends[0]


def refusal(shape: Any, items: Any) -> Any:
    with pytest.raises(InvalidShape) as refused:
        shape.read(items)
    return refused.value.errors


def test_a_result_is_read_into_a_reported_end() -> None:
    item = {"id": 5, "lease": 7, "outcome": "retry", "result": {"a": [1, "x", {"b": None}]},
            "error": {**ERROR, "type": " Boom "}, "delay_s": 2,
            "started_at": "2026-11-23T03:00:00+02:00"}
    assert end(item) == ReportedEnd(
        task_id=5, lease=7, outcome="retry", value={"a": [1, "x", {"b": None}]},
        error={**ERROR, "type": "Boom"}, delay_s=2.0,
        started_at=datetime(2026, 11, 23, 1, tzinfo=UTC))


def test_left_out_and_null_fields_are_none() -> None:
    nulls = {"result": None, "error": None, "delay_s": None, "started_at": None}
    assert end(DONE) == end({**DONE, **nulls}) == ReportedEnd(task_id=1, lease=7,
                                                               outcome="success")


@pytest.mark.parametrize(("given", "taken"), [
    ({"id": "5", "lease": " 7 "}, {"task_id": 5, "lease": 7}),
    ({"id": 5.0, "lease": "7.0"}, {"task_id": 5, "lease": 7}),
    ({"delay_s": "1e3"}, {"delay_s": 1000.0}),
    ({"delay_s": limits.MAX_DELAY_S}, {"delay_s": limits.MAX_DELAY_S}),
    ({"started_at": "2026-11-23T02:00:00"}, {"started_at": datetime(2026, 11, 23, 2, tzinfo=UTC)}),
    ({"error": {"type": 5, "message": "", "traceback": " "}},
     {"error": {"type": "5", "message": "", "traceback": " "}}),
])
def test_values_are_converted_as_the_api_always_converted_them(given: dict[str, Any],
                                                                taken: dict[str, Any]) -> None:
    reported = end({**DONE, **given})
    assert {name: getattr(reported, name) for name in taken} == taken


AT_MOST = "Ensure this value is less than or equal to {}."
AT_LEAST = "Ensure this value is greater than or equal to {}."
NOT_WHOLE = "A valid integer is required."
NOT_NUMBER = "A valid number is required."
BAD_TIME = ("Datetime has wrong format. Use one of these formats instead: "
            "YYYY-MM-DDThh:mm[:ss[.uuuuuu]][+HH:MM|-HH:MM|Z].")
BAD_TEXT = "Strings may not contain NUL (\\u0000) characters or lone surrogates."


@pytest.mark.parametrize(("field", "value", "message"), [
    ("id", 0, AT_LEAST.format(1)),
    ("id", 2**63, AT_MOST.format(2**63 - 1)),
    ("id", True, NOT_WHOLE),
    ("id", "one", NOT_WHOLE),
    ("id", 1.5, NOT_WHOLE),
    ("id", [1], NOT_WHOLE),
    ("id", "1" * 1001, "String value too large."),
    ("id", None, "This field may not be null."),
    ("lease", -1, AT_LEAST.format(0)),
    ("outcome", "won", '"won" is not a valid choice.'),
    ("outcome", "", '"" is not a valid choice.'),
    ("outcome", ["success"], "\"['success']\" is not a valid choice."),
    ("result", "nul\x00", BAD_TEXT),
    ("result", {"\ud800": 1}, BAD_TEXT),
    ("result", [["a\ud800"]], BAD_TEXT),
    ("delay_s", -1, AT_LEAST.format(0)),
    ("delay_s", limits.MAX_DELAY_S + 1, AT_MOST.format(limits.MAX_DELAY_S)),
    ("delay_s", "soon", NOT_NUMBER),
    ("delay_s", "inf", NOT_NUMBER),
    ("delay_s", [], NOT_NUMBER),
    ("delay_s", 10**400, "Integer value too large to convert to float"),
    ("started_at", "yesterday", BAD_TIME),
    ("started_at", "", BAD_TIME),
    ("started_at", "2026-13-01T00:00", BAD_TIME),
    ("started_at", 1_800_000_000, BAD_TIME),
    ("started_at", "0001-01-01T00:00:00+05:00", limits.TIME_OUT_OF_RANGE),
    ("error", "boom", {"non_field_errors": ["Invalid data. Expected a dictionary, but got str."]}),
    ("error", {"type": "x"}, {"message": ["This field is required."],
                              "traceback": ["This field is required."]}),
    ("error", {**ERROR, "line": 3}, {"line": ["Unknown field."]}),
    ("error", {**ERROR, "type": None}, {"type": ["This field may not be null."]}),
    ("error", {**ERROR, "type": True}, {"type": ["Not a valid string."]}),
    ("error", {**ERROR, "message": "nul\x00"}, {"message": ["Null characters are not allowed."]}),
    ("error", {**ERROR, "traceback": "a\udfffb"},
     {"traceback": ["Surrogate characters are not allowed: U+DFFF."]}),
])
def test_each_bad_field_is_refused_with_its_message(field: str, value: Any,
                                                    message: str | dict[str, Any]) -> None:
    answer = message if isinstance(message, dict) else [message]
    assert refusal(RESULTS, [DONE, {**DONE, "id": 2, field: value}]) == {1: {field: answer}}


@pytest.mark.parametrize("name", list(limits.MAX_ERROR_CHARS))
def test_an_error_text_is_at_most_its_limit(name: str) -> None:
    most = limits.MAX_ERROR_CHARS[name]
    assert end({**DONE, "error": {**ERROR, name: "x" * most}}).error[name] == "x" * most  # type: ignore[index]
    too_long = {**DONE, "error": {**ERROR, name: "x" * most + "\x00"}}
    assert refusal(RESULTS, [too_long]) == {0: {"error": {name: [
        f"Ensure this field has no more than {most} characters.",
        "Null characters are not allowed."]}}}


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def test_a_result_is_nested_at_most_max_result_depth() -> None:
    assert end({**DONE, "result": nested(limits.MAX_RESULT_DEPTH)}).value == nested(
        limits.MAX_RESULT_DEPTH)
    assert refusal(RESULTS, [{**DONE, "result": nested(limits.MAX_RESULT_DEPTH + 1)}]) == {
        0: {"result": ["Payload is nested too deeply."]}}


def test_every_problem_of_an_item_is_named() -> None:
    assert refusal(RESULTS, [{"lease": "x", "outcome": "won"}]) == {0: {
        "id": ["This field is required."], "lease": [NOT_WHOLE],
        "outcome": ['"won" is not a valid choice.']}}


def test_unknown_fields_are_refused_before_any_other_problem() -> None:
    assert refusal(RESULTS, [{"lease": -1, "why": 1, "extra": 2}]) == {0: {
        "extra": ["Unknown field."], "why": ["Unknown field."]}}
    many = {f"k{n:02}": n for n in range(30)}
    assert list(refusal(LEASES, [many])[0]) == [f"k{n:02}" for n in range(20)]


@pytest.mark.parametrize(("item", "answer"), [
    (None, ["This field may not be null."]),
    (5, {"non_field_errors": ["Invalid data. Expected a dictionary, but got int."]}),
    ([1, 7], {"non_field_errors": ["Invalid data. Expected a dictionary, but got list."]}),
])
def test_an_item_that_is_not_an_object_is_refused(item: Any, answer: Any) -> None:
    assert refusal(LEASES, [{"id": 1, "lease": 0}, item]) == {1: answer}
    assert refusal(RESULTS, [item]) == {0: answer}


#: Each list, with an item it takes.
LISTS = [(LEASES, {"id": 1, "lease": 7}), (RESULTS, DONE)]


@pytest.mark.parametrize(("shape", "item"), LISTS)
def test_a_list_names_each_task_once(shape: Any, item: dict[str, Any]) -> None:
    assert refusal(shape, [item, {**item, "lease": 8}]) == ["Each task may appear once."]


@pytest.mark.parametrize(("shape", "item"), LISTS)
def test_a_list_holds_at_most_max_worker_batch(shape: Any, item: dict[str, Any]) -> None:
    items = [{**item, "id": n} for n in range(1, limits.MAX_WORKER_BATCH + 2)]
    assert len(shape.read(items[:-1])) == limits.MAX_WORKER_BATCH
    assert refusal(shape, items) == [
        f"Ensure this field has no more than {limits.MAX_WORKER_BATCH} elements."]
    # its items' problems are answered first
    assert refusal(shape, [*items, {**item, "id": 0}]) == {
        limits.MAX_WORKER_BATCH + 1: {"id": [AT_LEAST.format(1)]}}


@pytest.mark.parametrize("value", ["all", {"id": 1}, 5])
def test_a_list_must_be_a_list(value: Any) -> None:
    assert refusal(RESULTS, value) == [
        f'Expected a list of items but got type "{type(value).__name__}".']


def test_the_api_answers_the_errors_under_the_field() -> None:
    body = {"worker": "h:1:x", "results": [DONE, {**DONE, "id": 2, "lease": -1}]}
    form = shapes.FinishSerializer(data=body)
    assert not form.is_valid()
    assert form.errors == {"results": {1: {"lease": [AT_LEAST.format(0)]}}}
    for missing, answer in [({}, {"results": ["This field is required."]}),
                            ({"results": None}, {"results": ["This field may not be null."]})]:
        form = shapes.FinishSerializer(data={"worker": "h:1:x", **missing})
        assert not form.is_valid() and form.errors == answer
    claim = shapes.ClaimSerializer(data={"worker": "h:1:x", "max": 1})
    assert claim.is_valid() and claim.reported_ends() == []
    leases = shapes.LeasesSerializer(data={"tasks": [{"id": 3, "lease": 0}]})
    assert leases.is_valid() and leases.leases() == {3: 0}


def test_each_declared_record_is_described_by_one_serializer_class() -> None:
    # DRF deep-copies a serializer's fields for each instance: a copied record would get a
    # second class of the same name, and the schema two components called "ResultRequest".
    assert copy.deepcopy(remote_workers.RESULT) is remote_workers.RESULT
    finish = shapes.FinishSerializer().fields["results"]
    claim = shapes.ClaimSerializer().fields["results"]
    assert type(finish.child) is type(claim.child)
