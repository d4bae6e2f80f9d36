"""DRF fields that describe a declared JSON shape (tasks_core.json_fields) in the OpenAPI
schema. Reading is the shape's alone: a `ShapeListField` hands its data to the shape, and the
serializers it builds for items only describe them."""

from __future__ import annotations

import functools
from typing import Any

from rest_framework import serializers
from rest_framework.fields import empty

from tasks_api.serializers import PayloadField, StrictSerializer, TimeField
from tasks_core import json_fields
from tasks_core.exceptions import InvalidShape


def _field(kind: json_fields.Kind | json_fields.Optional) -> serializers.Field:
    """The DRF field that describes `kind`: its type and bounds."""
    options: dict[str, Any] = {}
    if isinstance(kind, json_fields.Optional):
        kind, options = kind.kind, {"required": False, "allow_null": True, "default": None}
    match kind:
        case json_fields.Whole(least, most):
            return serializers.IntegerField(min_value=least, max_value=most, **options)
        case json_fields.Number(least, most):
            return serializers.FloatField(min_value=least, max_value=most, **options)
        case json_fields.Choice(choices):
            return serializers.ChoiceField(choices=list(choices), **options)
        case json_fields.Text(most, trim):
            return serializers.CharField(max_length=most, allow_blank=True, trim_whitespace=trim,
                                         **options)
        case json_fields.Moment():
            return TimeField(**options)
        case json_fields.Json():
            return PayloadField(**options)
        case json_fields.Record():
            return record_serializer(kind)(**options)
    raise TypeError(f"no schema field for {kind!r}")


@functools.cache
def record_serializer(record: json_fields.Record) -> type[serializers.Serializer]:
    """The serializer class that describes `record`, named as the schema calls it (strict, as
    a record refuses fields it does not know)."""
    fields = {name: _field(kind) for name, kind in record.fields.items()}
    return type(f"{record.name}Serializer", (StrictSerializer,), fields)


class ShapeListField(serializers.ListField):
    """A list read by a `json_fields.ListOf`, whose items the schema shows as its records."""

    def __init__(self, shape: json_fields.ListOf, **kwargs: Any) -> None:
        super().__init__(child=_field(shape.item), max_length=shape.most, **kwargs)
        self.shape = shape

    def run_validation(self, data: Any = empty) -> Any:
        is_empty, data = self.validate_empty_values(data)
        if is_empty:
            return data
        try:
            return self.shape.read(data)
        except InvalidShape as exc:
            raise serializers.ValidationError(exc.errors) from exc
