"""Shapes of the worker API's requests and answers (`/api/v1/worker/...`)."""

from __future__ import annotations

import math
import typing
from collections.abc import Callable, Mapping
from typing import Any

from rest_framework import serializers

from tasks_api.serializers import (
    PayloadField,
    StrictSerializer,
    plain_items,
    plain_json,
)
from tasks_core import limits, remote_workers, scheduling
from tasks_core.conf import atf_settings
from tasks_core.models import TaskAttempt
from tasks_core.remote_workers import ReportedEnd

#: Most tasks, leases or results in one request.
MAX_BATCH = 1000
#: Longest text of an error's type, message and traceback.
MAX_ERROR_CHARS = {"type": 200, "message": 10_000, "traceback": 100_000}
_MAX_ID = 2**63 - 1
#: What a worker may report of an attempt.
_OUTCOMES = [o.value for o in (
    TaskAttempt.Outcome.SUCCESS, TaskAttempt.Outcome.FATAL, TaskAttempt.Outcome.RETRY,
    TaskAttempt.Outcome.TIMEOUT, TaskAttempt.Outcome.CANCELLED)]
_NAME = r"^[A-Za-z0-9_.:@/-]+$"


class WorkerIdSerializer(StrictSerializer):
    worker = serializers.RegexField(_NAME, max_length=200,
                                    help_text="The id the worker registered with.")


class LambdaNamesSerializer(StrictSerializer):
    lambdas = serializers.ListField(child=serializers.CharField(max_length=200), min_length=1,
                                    max_length=MAX_BATCH)


class LambdaTimeoutSerializer(serializers.Serializer):
    name = serializers.CharField()
    heartbeat_timeout_s = serializers.FloatField()


class LambdaTimeoutsSerializer(serializers.Serializer):
    lambdas = LambdaTimeoutSerializer(many=True)
    unknown = serializers.ListField(child=serializers.CharField(),
                                    help_text="Names that are unknown or another team's.")


class RegisterSerializer(WorkerIdSerializer, LambdaNamesSerializer):
    host = serializers.CharField(max_length=200)
    pid = serializers.IntegerField(min_value=0, max_value=2**31 - 1)
    threads = serializers.IntegerField(min_value=1, max_value=10_000)


class LeaseSerializer(StrictSerializer):
    id = serializers.IntegerField(min_value=1, max_value=_MAX_ID)
    lease = serializers.IntegerField(min_value=0, max_value=_MAX_ID)


class PlainItemsListField(serializers.ListField):
    """A ListField that takes plainly valid items without running its child serializer on each
    (most of a start's or finish's time in the API: docs/benchmarks.md). `plain(item)` returns the
    item as the child would validate it, or None when it is not plainly valid: then the whole
    list is validated by the child, with its usual errors."""

    def __init__(self, *, plain: Callable[[Any], dict[str, Any] | None], **kwargs: Any) -> None:
        self.plain = plain
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> Any:
        if (items := plain_items(data, self.plain)) is not None:
            return items
        return super().to_internal_value(data)


_LEASE_KEYS = frozenset({"id", "lease"})


def _plain_lease(item: Any) -> dict[str, Any] | None:
    """LeaseSerializer's answer for {"id": int, "lease": int} in range; else None."""
    if type(item) is not dict or item.keys() != _LEASE_KEYS:
        return None
    task_id, lease = item["id"], item["lease"]
    if (type(task_id) is int and type(lease) is int and 1 <= task_id <= _MAX_ID
            and 0 <= lease <= _MAX_ID):
        return {"id": task_id, "lease": lease}
    return None


def _unique_ids(items: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    ids = [item["id"] for item in items]
    if len(set(ids)) != len(ids):
        raise serializers.ValidationError("Each task may appear once.")
    return items


class LeasesSerializer(StrictSerializer):
    tasks = PlainItemsListField(plain=_plain_lease, child=LeaseSerializer(),
                                max_length=MAX_BATCH)

    def validate_tasks(self, value: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        return _unique_ids(value)

    def leases(self) -> dict[int, int]:
        return {item["id"]: item["lease"] for item in self.validated_data["tasks"]}


class WorkerLeasesSerializer(WorkerIdSerializer, LeasesSerializer):
    seen = serializers.BooleanField(default=True,
                                    help_text="Also renew the worker's last_seen.")


def _wire_field(kind: Any) -> serializers.Field:
    """The schema field of one ClaimedTask field's type."""
    nullable = type(None) in typing.get_args(kind)
    base = next((arg for arg in typing.get_args(kind) if arg is not type(None)), kind)
    if base is Any:
        return serializers.JSONField()
    field_class = {int: serializers.IntegerField, str: serializers.CharField,
                   float: serializers.FloatField}[base]
    return field_class(allow_null=nullable) if nullable else field_class()


#: A claimed task as the claim answers it: store.ClaimedTask's fields, so the API sends each
#: one (the view answers `ClaimedTask.as_json()`; this is its schema).
ClaimedTaskSerializer = type("ClaimedTaskSerializer", (serializers.Serializer,), {
    name: _wire_field(kind) for name, kind in remote_workers.claimed_task_types().items()})


class StartedSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    started = serializers.BooleanField(help_text="False: the lease moved on; do not run it.")


class StartedListSerializer(serializers.Serializer):
    tasks = StartedSerializer(many=True)


class LostSerializer(serializers.Serializer):
    lost = serializers.ListField(child=serializers.IntegerField(),
                                 help_text="Tasks whose lease is gone: stop reporting them.")
    cancel = serializers.ListField(child=serializers.IntegerField(),
                                   help_text="Running tasks a cancel asks to stop: interrupt "
                                             "their lambda, report the attempt `cancelled`.")


class ErrorSerializer(StrictSerializer):
    type = serializers.CharField(max_length=MAX_ERROR_CHARS["type"], allow_blank=True)
    message = serializers.CharField(max_length=MAX_ERROR_CHARS["message"], allow_blank=True,
                                    trim_whitespace=False)
    traceback = serializers.CharField(max_length=MAX_ERROR_CHARS["traceback"], allow_blank=True,
                                      trim_whitespace=False)


class ResultSerializer(LeaseSerializer):
    outcome = serializers.ChoiceField(choices=_OUTCOMES)
    result = PayloadField(required=False, allow_null=True, default=None)
    error = ErrorSerializer(required=False, allow_null=True, default=None)
    delay_s = serializers.FloatField(required=False, allow_null=True, default=None, min_value=0,
                                     max_value=limits.MAX_DELAY_S)
    started_at = serializers.DateTimeField(required=False, allow_null=True, default=None)

    def validate_result(self, value: Any) -> Any:
        """Refuse text the store cannot hold, so one bad result never fails a whole batch."""
        pending = [value]
        while pending:  # iterative: deep nesting must not overflow the stack
            item = pending.pop()
            if isinstance(item, str) and limits.bad_text(item):
                raise serializers.ValidationError(scheduling.BAD_TEXT)
            if isinstance(item, Mapping):
                if any(limits.bad_text(key) for key in item):
                    raise serializers.ValidationError(scheduling.BAD_TEXT)
                pending.extend(item.values())
            elif isinstance(item, list):
                pending.extend(item)
        return value


_RESULT_KEYS = frozenset({"id", "lease", "outcome", "result", "error", "delay_s",
                          "started_at"})
_STARTED_AT = serializers.DateTimeField(allow_null=True)


def _plain_error(error: Any) -> dict[str, str] | None:
    if type(error) is not dict or error.keys() != MAX_ERROR_CHARS.keys():
        return None
    for name, limit in MAX_ERROR_CHARS.items():
        text = error[name]
        if type(text) is not str or len(text) > limit or limits.bad_text(text):
            return None
    if error["type"] != error["type"].strip():  # the type's CharField trims it
        return None
    return {name: error[name] for name in MAX_ERROR_CHARS}


def _plain_result(item: Any) -> dict[str, Any] | None:
    """ResultSerializer's answer for a plainly valid result; else None."""
    if type(item) is not dict or not item.keys() <= _RESULT_KEYS:
        return None
    lease = _plain_lease({"id": item.get("id"), "lease": item.get("lease")})
    outcome, result = item.get("outcome"), item.get("result")
    error, delay_s = item.get("error"), item.get("delay_s")
    if lease is None or type(outcome) is not str or outcome not in _OUTCOMES:
        return None
    if not plain_json(result):
        return None
    if error is not None and (error := _plain_error(error)) is None:
        return None
    if delay_s is not None:
        if (type(delay_s) not in (int, float) or not math.isfinite(delay_s)
                or not 0 <= delay_s <= limits.MAX_DELAY_S):
            return None
        delay_s = float(delay_s)
    try:
        started_at = _STARTED_AT.run_validation(item.get("started_at"))
    except serializers.ValidationError:
        return None
    return {**lease, "outcome": outcome, "result": result, "error": error, "delay_s": delay_s,
            "started_at": started_at}


def _results(**options: Any) -> PlainItemsListField:
    """The list of finished attempts that finish/ takes, and a claim may carry."""
    return PlainItemsListField(plain=_plain_result, child=ResultSerializer(),
                               max_length=MAX_BATCH, **options)


class ReportsResults(StrictSerializer):
    """A request with `results`: finished attempts, validated and read in one way."""

    def validate_results(self, value: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        return _unique_ids(value)

    def reported_ends(self) -> list[ReportedEnd]:
        return [ReportedEnd(task_id=item["id"], lease=item["lease"], outcome=item["outcome"],
                       value=item["result"], error=item["error"], delay_s=item["delay_s"],
                       started_at=item["started_at"])
                for item in self.validated_data.get("results", ())]


class FinishSerializer(WorkerIdSerializer, ReportsResults):
    results = _results()


class ClaimSerializer(WorkerIdSerializer, ReportsResults):
    max = serializers.IntegerField(min_value=1, max_value=MAX_BATCH,
                                   help_text="Most tasks to claim.")
    wait_s = serializers.FloatField(
        min_value=0, default=0, help_text="Seconds to wait while no task is ready "
        "(capped at ATF_WORKER_CLAIM_WAIT_MAX_S).")

    start = serializers.BooleanField(
        default=False, help_text="Start the claimed tasks too (claimed and started in one "
        "step, for executors that are idle now): no start call follows, and a task whose lambda "
        "does not run is handed back with release.")

    results = _results(
        required=False, default=list, help_text="Finished attempts to record in the claim's "
        "commit, as finish/ takes them (answered in `results`, as finish/ answers). A claim that "
        "carries results does not wait for work: their statuses are not held back.")

    def validate_wait_s(self, value: float) -> float:
        return min(value, atf_settings.worker_claim_wait_max_s)


class FinishedSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    status = serializers.CharField(allow_null=True,
                                   help_text="The task's new status; null: refused, the lease "
                                             "moved on and nothing was written.")


class FinishedListSerializer(serializers.Serializer):
    results = FinishedSerializer(many=True)


class ClaimedSerializer(FinishedListSerializer):
    """A claim's answer: its tasks, and the results it carried as finish/ answers them."""

    tasks = ClaimedTaskSerializer(many=True)


class ReleasedSerializer(serializers.Serializer):
    released = serializers.IntegerField()
