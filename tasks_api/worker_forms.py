"""The remote worker's hot requests (claim, finish, heartbeat, start, release) read in plain code.

A DRF serializer deep-copies each of its declared fields for every instance and runs each
value through a field's validators: for a claim that carries 64 results, most of the API's
own processor time before the store. A body that a worker sends as it should (each value of
its plain JSON type, within its bounds, no unknown field) is read here in a few type checks
per field, the leases and results by the same `json_fields` shapes the serializer hands them
to, into the values the serializer would give. Anything else (a wrong type, a value out of
bounds, a value DRF would convert, such as "7" for 7) goes to the serializer, which takes or
refuses it as before, with the same error body: every 400 is still the serializer's.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tasks_api import worker_serializers as shapes
from tasks_core import json_fields, limits, remote_workers
from tasks_core.conf import atf_settings
from tasks_core.exceptions import InvalidShape
from tasks_core.remote_workers import ReportedEnd


class _NotPlain(Exception):
    """A value this module does not take as it is: the serializer reads the body."""


#: A worker's id as `shapes.WorkerIdSerializer` takes it unchanged (no surrounding space).
_WORKER_ID = re.compile(r"[A-Za-z0-9_.:@/-]{1,200}")


def _worker_id(value: Any) -> str:
    if type(value) is str and _WORKER_ID.fullmatch(value):
        return value
    raise _NotPlain


def _whole(least: int, most: int) -> Callable[[Any], int]:
    def read(value: Any) -> int:
        if type(value) is int and least <= value <= most:
            return value
        raise _NotPlain
    return read


def _seconds(value: Any) -> float:
    """A claim's wait: a finite number, at least 0, capped as `ClaimSerializer` caps it."""
    if type(value) in (int, float) and math.isfinite(value) and value >= 0:
        return min(float(value), atf_settings.worker_claim_wait_max_s)
    raise _NotPlain


def _flag(value: Any) -> bool:
    if type(value) is bool:
        return value
    raise _NotPlain


def _shaped(shape: json_fields.ListOf) -> Callable[[Any], list[Any]]:
    def read(value: Any) -> list[Any]:
        if type(value) is not list:
            raise _NotPlain
        try:
            return shape.read(value)
        except InvalidShape:
            raise _NotPlain from None
    return read


#: A field with no default: the serializer answers its absence.
_REQUIRED = object()


@dataclass(frozen=True)
class _Plain:
    """How one serializer's fields are read: per field its reader and its default."""

    fields: Mapping[str, tuple[Callable[[Any], Any], Any]]

    def read(self, data: Any) -> dict[str, Any]:
        if type(data) is not dict or not data.keys() <= self.fields.keys():
            raise _NotPlain
        values = {}
        for name, (read, default) in self.fields.items():
            if name in data:
                values[name] = read(data[name])
            elif default is _REQUIRED:
                raise _NotPlain
            else:
                values[name] = default() if callable(default) else default
        return values


_WORKER = (_worker_id, _REQUIRED)
_LEASES = (_shaped(remote_workers.LEASES), _REQUIRED)

#: The serializers read here, and how; their defaults as they declare them.
PLAIN: dict[type[shapes.StrictSerializer], _Plain] = {
    shapes.ClaimSerializer: _Plain({
        "worker": _WORKER, "max": (_whole(1, limits.MAX_WORKER_BATCH), _REQUIRED),
        "wait_s": (_seconds, 0), "start": (_flag, False), "trace": (_flag, False),
        "results": (_shaped(remote_workers.RESULTS), list)}),
    shapes.FinishSerializer: _Plain({
        "worker": _WORKER, "results": (_shaped(remote_workers.RESULTS), _REQUIRED)}),
    shapes.WorkerLeasesSerializer: _Plain({
        "worker": _WORKER, "tasks": _LEASES, "seen": (_flag, True)}),
    shapes.LeasesSerializer: _Plain({"tasks": _LEASES}),
}


@dataclass(frozen=True)
class Form:
    """A body read in plain code, used as its serializer would be."""

    validated_data: dict[str, Any]

    def reported_ends(self) -> list[ReportedEnd]:
        ends: list[ReportedEnd] = self.validated_data.get("results", [])
        return ends

    def leases(self) -> dict[int, int]:
        return {item["id"]: item["lease"] for item in self.validated_data["tasks"]}


def read(serializer_class: type[shapes.StrictSerializer], data: Any) -> Any:
    """`data` read as `serializer_class` reads it: in plain code where it is plainly valid,
    else by the serializer (a ValidationError, 400, where it is not valid)."""
    if (plain := PLAIN.get(serializer_class)) is not None:
        try:
            return Form(plain.read(data))
        except _NotPlain:
            pass
    form = serializer_class(data=data)
    form.is_valid(raise_exception=True)
    return form
