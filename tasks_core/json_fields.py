"""Declared shapes of JSON objects, each read once into Python values with per-field messages.

A `Record` names its fields and their kinds (`Whole`, `Number`, `Choice`, `Text`, `Moment`,
`Json`, or another Record); `Record.read` returns the object's values or raises InvalidShape
with every problem, keyed by field, and `ListOf.read` does so for a list of them, keyed by
index. The kinds take and refuse what the API's DRF fields took and refused, with their
messages (the worker API answered with them before it read its bodies here), and declare
the bounds the API's OpenAPI schema shows (tasks_api builds its fields from them).

Each kind takes its usual value (an int, a str, ...) at the cost of a type check; the
conversions DRF made (a whole number written "7" or 7.0, a number as text) are kept for the
rest.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from tasks_core import limits, scheduling
from tasks_core.exceptions import InvalidShape

REQUIRED = "This field is required."
NOT_NULL = "This field may not be null."
#: Longest text a number may be written as.
_NUMBER_CHARS = 1000
#: What a whole number written as text may end with ("7.0", "7. ").
_WHOLE_DECIMALS = re.compile(r"\.0*\s*$")
#: Unknown fields named in one error.
_MOST_UNKNOWN = 20


class Kind(Protocol):
    """How one field's value is read: `read` returns it as Python takes it, or raises
    InvalidShape with the field's messages."""

    def read(self, value: Any) -> Any: ...


def _refuse(*messages: str) -> InvalidShape:
    return InvalidShape(list(messages))


@dataclass(frozen=True)
class Whole:
    """A whole number from `least` to `most`."""

    least: int
    most: int

    def read(self, value: Any) -> int:
        if type(value) is not int:
            value = _whole(value)
        if not self.least <= value <= self.most:
            raise _bounds(value, self.least, self.most)
        return value


def _whole(value: Any) -> int:
    if isinstance(value, str) and len(value) > _NUMBER_CHARS:
        raise _refuse("String value too large.")
    try:
        return int(_WHOLE_DECIMALS.sub("", str(value)))
    except (TypeError, ValueError):
        raise _refuse("A valid integer is required.") from None


def _bounds(value: float, least: float, most: float) -> InvalidShape:
    if value > most:
        return _refuse(f"Ensure this value is less than or equal to {most}.")
    return _refuse(f"Ensure this value is greater than or equal to {least}.")


@dataclass(frozen=True)
class Number:
    """A finite number from `least` to `most`, as a float."""

    least: float
    most: float

    def read(self, value: Any) -> float:
        if isinstance(value, str) and len(value) > _NUMBER_CHARS:
            raise _refuse("String value too large.")
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise _refuse("A valid number is required.") from None
        except OverflowError:
            raise _refuse("Integer value too large to convert to float") from None
        if not math.isfinite(number):
            raise _refuse("A valid number is required.")
        if not self.least <= number <= self.most:
            raise _bounds(number, self.least, self.most)
        return number


@dataclass(frozen=True)
class Choice:
    """One of `choices` (a value is matched by its text)."""

    choices: Sequence[str]

    def read(self, value: Any) -> str:
        if (text := str(value)) in self.choices:
            return text
        raise _refuse(f'"{value}" is not a valid choice.')


@dataclass(frozen=True)
class Text:
    """Text of at most `most` characters, blank allowed; `trim`: surrounding white space
    dropped. A number is taken as its text."""

    most: int
    trim: bool = False

    def read(self, value: Any) -> str:
        if type(value) is not str:
            if isinstance(value, bool) or not isinstance(value, str | int | float):
                raise _refuse("Not a valid string.")
            value = str(value)
        if self.trim:
            value = value.strip()
        if len(value) <= self.most and not limits.bad_text(value):
            return value
        problems = limits.text_errors(value)
        if len(value) > self.most:
            problems.insert(0, f"Ensure this field has no more than {self.most} characters.")
        raise _refuse(*problems)


#: Why a time is refused: it is not ISO 8601.
MOMENT_FORMAT = ("Datetime has wrong format. Use one of these formats instead: "
                 + scheduling.ISO_8601_FORMAT + ".")


@dataclass(frozen=True)
class Moment:
    """An ISO 8601 time (in the current time zone, UTC by default, when it names none), read
    in UTC; within limits.EARLIEST_TIME and limits.LATEST_TIME."""

    def read(self, value: Any) -> datetime:
        parsed = scheduling.parse_datetime(value) if isinstance(value, str) else None
        if parsed is None:
            raise _refuse(MOMENT_FORMAT)
        try:
            return limits.in_utc(parsed)
        except ValueError as exc:
            raise _refuse(str(exc)) from None


@dataclass(frozen=True)
class Json:
    """Any JSON value the store can hold: text without NUL or lone surrogates, objects and
    arrays nested at most `depth` deep."""

    depth: int

    def read(self, value: Any) -> Any:
        if isinstance(value, str | dict | list) and (
                problem := scheduling.shape_error(value, self.depth)):
            raise _refuse(problem)
        return value


@dataclass(frozen=True)
class Optional:
    """A field that may be left out or null: then None."""

    kind: Kind


@dataclass(frozen=True, eq=False)
class Record:
    """A JSON object of these fields (each required unless Optional), any other refused; read
    as `make` of its values (a dict by field name), or as that dict. `name`: what the API's
    schema calls it."""

    name: str
    fields: Mapping[str, Kind | Optional]
    make: Callable[[dict[str, Any]], Any] | None = None
    _readers: tuple[tuple[str, Callable[[Any], Any], bool], ...] = field(init=False, repr=False)
    _names: frozenset[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_readers", tuple(
            (name, (kind.kind if isinstance(kind, Optional) else kind).read,
             isinstance(kind, Optional))
            for name, kind in self.fields.items()))
        object.__setattr__(self, "_names", frozenset(self.fields))

    def __deepcopy__(self, memo: dict[int, Any]) -> Record:
        """A record is declared once and never changes: a copy is itself. (DRF deep-copies a
        serializer's fields for each instance; a copied record would be described by a
        second serializer class of the same name, which the schema refuses.)"""
        return self

    def read(self, data: Any) -> Any:
        if type(data) is not dict and not isinstance(data, Mapping):
            raise InvalidShape({"non_field_errors": [
                f"Invalid data. Expected a dictionary, but got {type(data).__name__}."]})
        if not data.keys() <= self._names:
            unknown = sorted(str(key) for key in data if key not in self._names)
            raise InvalidShape({key[:100]: ["Unknown field."] for key in unknown[:_MOST_UNKNOWN]})
        values: dict[str, Any] = {}
        errors: dict[str, Any] = {}
        for name, read, optional in self._readers:
            value = data.get(name)
            if value is None:
                if optional:
                    values[name] = None
                else:
                    errors[name] = [NOT_NULL if name in data else REQUIRED]
                continue
            try:
                values[name] = read(value)
            except InvalidShape as exc:
                errors[name] = exc.errors
        if errors:
            raise InvalidShape(errors)
        return values if self.make is None else self.make(values)


@dataclass(frozen=True)
class ListOf:
    """A JSON array of at most `most` items of one kind, each one's errors keyed by its index;
    `key` names what may appear only once (`unique_message` says so)."""

    item: Kind
    most: int
    key: Callable[[Any], Hashable] | None = None
    unique_message: str = ""

    def read(self, data: Any) -> list[Any]:
        if not isinstance(data, list):
            raise _refuse(f'Expected a list of items but got type "{type(data).__name__}".')
        items: list[Any] = []
        errors: dict[int, Any] = {}
        for index, value in enumerate(data):
            if value is None:
                errors[index] = [NOT_NULL]
                continue
            try:
                items.append(self.item.read(value))
            except InvalidShape as exc:
                errors[index] = exc.errors
        if errors:
            raise InvalidShape(errors)
        if len(items) > self.most:
            raise _refuse(f"Ensure this field has no more than {self.most} elements.")
        if self.key is not None and len({self.key(item) for item in items}) != len(items):
            raise _refuse(self.unique_message)
        return items
