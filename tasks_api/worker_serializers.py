"""Shapes of the worker API's requests and answers (`/api/v1/worker/...`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings
from rest_framework import serializers

from tasks_api.serializers import PayloadField, StrictSerializer, _renamed
from tasks_core import limits, scheduling
from tasks_core.models import TaskAttempt
from tasks_core.remote_workers import Ending

#: Most tasks, leases or results in one request.
MAX_BATCH = 1000
#: Longest text of an error's type, message and traceback.
MAX_ERROR_CHARS = {"type": 200, "message": 10_000, "traceback": 100_000}
_MAX_ID = 2**63 - 1
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


class ClaimSerializer(WorkerIdSerializer):
    max = serializers.IntegerField(min_value=1, max_value=MAX_BATCH,
                                   help_text="Most tasks to claim.")
    wait_s = serializers.FloatField(
        min_value=0, default=0, help_text="Seconds to wait while no task is ready "
        "(capped at ATF_WORKER_CLAIM_WAIT_MAX_S).")

    def validate_wait_s(self, value: float) -> float:
        return min(value, settings.ATF_WORKER_CLAIM_WAIT_MAX_S)


class LeaseSerializer(StrictSerializer):
    id = serializers.IntegerField(min_value=1, max_value=_MAX_ID)
    lease = serializers.IntegerField(min_value=0, max_value=_MAX_ID)


def _unique_ids(items: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    ids = [item["id"] for item in items]
    if len(set(ids)) != len(ids):
        raise serializers.ValidationError("Each task may appear once.")
    return items


class LeasesSerializer(StrictSerializer):
    tasks = serializers.ListField(child=LeaseSerializer(), max_length=MAX_BATCH)

    def validate_tasks(self, value: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        return _unique_ids(value)

    def leases(self) -> dict[int, int]:
        return {item["id"]: item["lease"] for item in self.validated_data["tasks"]}


class WorkerLeasesSerializer(WorkerIdSerializer, LeasesSerializer):
    seen = serializers.BooleanField(default=True,
                                    help_text="Also renew the worker's last_seen.")


class ClaimedTaskSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="task_id")
    lease = serializers.IntegerField()
    lambda_name = serializers.CharField(source="lambda_name")
    collection = serializers.CharField()
    priority = serializers.CharField()
    payload = serializers.JSONField()
    attempt = serializers.IntegerField()
    max_attempts = serializers.IntegerField()

    def get_fields(self) -> dict[str, serializers.Field]:
        return _renamed(super().get_fields(), lambda_name="lambda")


class ClaimedSerializer(serializers.Serializer):
    tasks = ClaimedTaskSerializer(many=True)


class StartedSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    started = serializers.BooleanField(help_text="False: the lease moved on; do not run it.")


class StartedListSerializer(serializers.Serializer):
    tasks = StartedSerializer(many=True)


class LostSerializer(serializers.Serializer):
    lost = serializers.ListField(child=serializers.IntegerField(),
                                 help_text="Tasks whose lease is gone: stop reporting them.")


class ErrorSerializer(StrictSerializer):
    type = serializers.CharField(max_length=MAX_ERROR_CHARS["type"], allow_blank=True)
    message = serializers.CharField(max_length=MAX_ERROR_CHARS["message"], allow_blank=True,
                                    trim_whitespace=False)
    traceback = serializers.CharField(max_length=MAX_ERROR_CHARS["traceback"], allow_blank=True,
                                      trim_whitespace=False)


class ResultSerializer(LeaseSerializer):
    outcome = serializers.ChoiceField(choices=[o.value for o in (
        TaskAttempt.Outcome.SUCCESS, TaskAttempt.Outcome.FATAL, TaskAttempt.Outcome.RETRY)])
    result = PayloadField(required=False, allow_null=True, default=None)
    error = ErrorSerializer(required=False, allow_null=True, default=None)
    delay_s = serializers.FloatField(required=False, allow_null=True, default=None, min_value=0,
                                     max_value=10 * 365 * 86400.0)
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


class FinishSerializer(WorkerIdSerializer):
    results = serializers.ListField(child=ResultSerializer(), max_length=MAX_BATCH)

    def validate_results(self, value: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        return _unique_ids(value)

    def endings(self) -> list[Ending]:
        return [Ending(task_id=item["id"], lease=item["lease"], outcome=item["outcome"],
                       value=item["result"], error=item["error"], delay_s=item["delay_s"],
                       started_at=item["started_at"])
                for item in self.validated_data["results"]]


class FinishedSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    status = serializers.CharField(allow_null=True,
                                   help_text="The task's new status; null: refused, the lease "
                                             "moved on and nothing was written.")


class FinishedListSerializer(serializers.Serializer):
    results = FinishedSerializer(many=True)


class ReleasedSerializer(serializers.Serializer):
    released = serializers.IntegerField()
