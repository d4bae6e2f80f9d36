"""The worker API's hot bodies read in plain code: the serializer's values for a body a worker
sends as it should, the serializer's own error body for every other."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.exceptions import ValidationError

from tasks_api import worker_forms
from tasks_api import worker_serializers as shapes

RESULT = {"id": 7, "lease": 3, "outcome": "success", "result": {"n": 1}, "error": None,
          "delay_s": None, "started_at": "2026-01-02T03:04:05Z"}
LEASE = {"id": 7, "lease": 3}

#: (serializer, body) a worker sends as it should.
PLAIN = [
    (shapes.ClaimSerializer, {"worker": "host:1/w", "max": 64}),
    (shapes.ClaimSerializer, {"worker": "w", "max": 1, "wait_s": 5, "start": True,
                              "trace": True, "results": [RESULT]}),
    (shapes.ClaimSerializer, {"worker": "w", "max": 2, "wait_s": 10_000.5}),  # capped
    (shapes.FinishSerializer, {"worker": "w", "results": [RESULT, {**RESULT, "id": 8}]}),
    (shapes.FinishSerializer, {"worker": "w", "results": []}),
    (shapes.WorkerLeasesSerializer, {"worker": "w", "tasks": [LEASE]}),
    (shapes.WorkerLeasesSerializer, {"worker": "w", "tasks": [], "seen": False}),
    (shapes.LeasesSerializer, {"tasks": [LEASE, {"id": 9, "lease": 0}]}),
]

#: (serializer, body) the serializer converts or refuses.
OTHER = [
    (shapes.ClaimSerializer, {"worker": "w", "max": "3"}),
    (shapes.ClaimSerializer, {"worker": " w ", "max": 3, "start": "true"}),
    (shapes.ClaimSerializer, {"worker": "w", "max": 0}),
    (shapes.ClaimSerializer, {"worker": "w", "max": True}),
    (shapes.ClaimSerializer, {"worker": "w"}),
    (shapes.ClaimSerializer, {"worker": "w w", "max": 1, "wait_s": -1, "colour": 1}),
    (shapes.ClaimSerializer, {"worker": "w", "max": 1, "wait_s": float("nan")}),
    (shapes.ClaimSerializer, {"worker": "w", "max": 1, "results": None}),
    (shapes.ClaimSerializer, ["not", "an", "object"]),
    (shapes.FinishSerializer, {"worker": "w" * 201, "results": [{**RESULT, "lease": -1}]}),
    (shapes.FinishSerializer, {"worker": "w", "results": [RESULT, RESULT]}),
    (shapes.WorkerLeasesSerializer, {"worker": "w", "tasks": {"id": 1}}),
    (shapes.LeasesSerializer, {"tasks": [{"id": "x", "lease": 1}]}),
    (shapes.LeasesSerializer, {}),
]


def _serializer(serializer_class: type[shapes.StrictSerializer], body: Any) -> Any:
    form = serializer_class(data=body)
    form.is_valid(raise_exception=True)
    return form


@pytest.mark.parametrize(("serializer_class", "body"), PLAIN)
def test_a_plain_body_reads_as_the_serializer_reads_it_without_one(
        serializer_class: type[shapes.StrictSerializer], body: Any,
        monkeypatch: pytest.MonkeyPatch, settings: Any) -> None:
    settings.ATF_WORKER_CLAIM_WAIT_MAX_S = 20
    expected = _serializer(serializer_class, body)

    def no_serializer(*_args: Any, **_kwargs: Any) -> None:
        raise AssertionError("a plain body went through the serializer")

    monkeypatch.setattr(serializer_class, "__init__", no_serializer)
    form = worker_forms.read(serializer_class, body)
    assert form.validated_data == dict(expected.validated_data)
    if "tasks" in body:
        assert form.leases() == expected.leases()
    if serializer_class is not shapes.LeasesSerializer and "tasks" not in body:
        assert form.reported_ends() == expected.reported_ends()


@pytest.mark.parametrize(("serializer_class", "body"), OTHER)
def test_any_other_body_is_the_serializers_to_take_or_refuse(
        serializer_class: type[shapes.StrictSerializer], body: Any) -> None:
    try:
        expected: Any = dict(_serializer(serializer_class, body).validated_data)
    except ValidationError as exc:
        expected = exc.detail
    try:
        got: Any = dict(worker_forms.read(serializer_class, body).validated_data)
    except ValidationError as exc:
        got = exc.detail
    assert got == expected
