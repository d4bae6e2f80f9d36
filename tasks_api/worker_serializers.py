"""Shapes of the worker API's requests and answers (`/api/v1/worker/...`)."""

from __future__ import annotations

import typing
from typing import Any

from rest_framework import serializers

from tasks_api.serializers import StrictSerializer
from tasks_api.shape_fields import ShapeListField
from tasks_core import limits, remote_workers
from tasks_core.conf import atf_settings
from tasks_core.remote_workers import ReportedEnd
from tasks_core.scheduling import shape_error

_NAME = r"^[A-Za-z0-9_.:@/-]+$"


class WorkerIdSerializer(StrictSerializer):
    worker = serializers.RegexField(_NAME, max_length=200,
                                    help_text="The id the worker registered with.")


class LambdaNamesSerializer(StrictSerializer):
    lambdas = serializers.ListField(child=serializers.CharField(max_length=200), min_length=1,
                                    max_length=limits.MAX_WORKER_BATCH)


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
    threads = serializers.IntegerField(
        min_value=1, max_value=10_000,
        help_text="Executor threads; at most ATF_API_MAX_WORKER_THREADS (256 by default).")

    def validate_threads(self, value: int) -> int:
        if value > (most := atf_settings.api_max_worker_threads):
            raise serializers.ValidationError(
                f"Ensure this value is less than or equal to {most} "
                f"(ATF_API_MAX_WORKER_THREADS).")
        return value


class LeasesSerializer(StrictSerializer):
    tasks = ShapeListField(remote_workers.LEASES)

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
    **{name: _wire_field(kind) for name, kind in remote_workers.claimed_task_types().items()},
    "trace": serializers.DictField(
        child=serializers.CharField(), required=False,
        help_text="The W3C trace context it was scheduled in (traceparent, tracestate): only "
        "for a claim that asked for it with `trace`, and only where the task has one."),
})


class StartedSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    started = serializers.BooleanField(help_text="False: the lease moved on; do not run it.")


class StartedListSerializer(serializers.Serializer):
    tasks = StartedSerializer(many=True)


def _unreached() -> serializers.ListField:
    """`unreached` of an answer (heartbeat/, finish/, claim/): present only where a shard of a
    sharded store could not be reached."""
    return serializers.ListField(
        child=serializers.IntegerField(), required=False,
        help_text="Only where a shard of a sharded store could not be reached: the request's "
                  "tasks on it, neither renewed, written nor lost (a result is answered null "
                  "and is sent again later).")


class LostSerializer(serializers.Serializer):
    lost = serializers.ListField(child=serializers.IntegerField(),
                                 help_text="Tasks whose lease is gone: stop reporting them.")
    cancel = serializers.ListField(child=serializers.IntegerField(),
                                   help_text="Running tasks a cancel asks to stop: interrupt "
                                             "their lambda, report the attempt `cancelled`.")
    unreached = _unreached()


class ReportsResults(StrictSerializer):
    """A request with `results`: finished attempts, validated and read in one way."""

    def reported_ends(self) -> list[ReportedEnd]:
        ends: list[ReportedEnd] = self.validated_data.get("results", [])
        return ends


class FinishSerializer(WorkerIdSerializer, ReportsResults):
    results = ShapeListField(remote_workers.RESULTS)


class ClaimSerializer(WorkerIdSerializer, ReportsResults):
    max = serializers.IntegerField(min_value=1, max_value=limits.MAX_WORKER_BATCH,
                                   help_text="Most tasks to claim.")
    wait_s = serializers.FloatField(
        min_value=0, default=0, help_text="Seconds to wait while no task is ready "
        "(capped at ATF_WORKER_CLAIM_WAIT_MAX_S).")

    start = serializers.BooleanField(
        default=False, help_text="Start the claimed tasks too (claimed and started in one "
        "step, for executors that are idle now): no start call follows, and a task whose lambda "
        "does not run is handed back with release.")

    trace = serializers.BooleanField(
        default=False, help_text="Answer each task's trace context (`trace`), for a worker "
        "that traces its attempts with OpenTelemetry.")

    results = ShapeListField(
        remote_workers.RESULTS, required=False, default=list,
        help_text="Finished attempts to record in the claim's commit, as finish/ takes them "
        "(answered in `results`, as finish/ answers). A claim that carries results "
        "does not wait for work: their statuses are not held back.")

    def validate_wait_s(self, value: float) -> float:
        return min(value, atf_settings.worker_claim_wait_max_s)


class FinishedSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    status = serializers.CharField(allow_null=True,
                                   help_text="The task's new status; null: refused, the lease "
                                             "moved on and nothing was written.")


class FinishedListSerializer(serializers.Serializer):
    results = FinishedSerializer(many=True)
    unreached = _unreached()


class ClaimedSerializer(FinishedListSerializer):
    """A claim's answer: its tasks, and the results it carried as finish/ answers them."""

    tasks = ClaimedTaskSerializer(many=True)


class ReleasedSerializer(serializers.Serializer):
    released = serializers.IntegerField()


class ParentResultsSerializer(StrictSerializer):
    """A page of the results a running task waited for: those placed after `after` (the
    place the last pair of the page before gave)."""

    id = serializers.IntegerField(min_value=1)
    after = serializers.IntegerField(min_value=0, default=0)


class ParentResultsPageSerializer(serializers.Serializer):
    """[place, result] pairs in order (the place: a group member's position in its group, a
    parent's task id); a page shorter than ATF's page size is the last."""

    results = serializers.ListField(child=serializers.ListField())


class StepsQuerySerializer(StrictSerializer):
    """A running task's recorded steps."""

    id = serializers.IntegerField(min_value=1)
    lease = serializers.IntegerField(min_value=0)


class StepsSerializer(serializers.Serializer):
    steps = serializers.ListField(child=serializers.DictField(),
                                  help_text='[{"name", "result"}] in the order recorded.')


class RecordStepSerializer(StepsQuerySerializer):
    """One step's result, recorded under the attempt's lease."""

    name = serializers.CharField(max_length=200)
    result = serializers.JSONField(allow_null=True)

    def validate_result(self, value: Any) -> Any:
        if problem := shape_error(value, atf_settings.max_payload_depth):
            raise serializers.ValidationError(problem)
        return value


class StepRecordedSerializer(serializers.Serializer):
    step = serializers.ChoiceField(choices=["recorded", "lease_lost", "too_large"])


class ProgressSerializer(StrictSerializer):
    """How far a running task got (ctx.progress of a remote worker)."""

    id = serializers.IntegerField(min_value=1)
    done = serializers.FloatField()
    total = serializers.FloatField(allow_null=True, default=None)
    note = serializers.CharField(max_length=200, allow_blank=True, default="")


class ProgressWrittenSerializer(serializers.Serializer):
    written = serializers.BooleanField()
