"""Shapes of the API's requests and answers, with their field checks. Nothing here changes state."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.db.models import Prefetch, Q, QuerySet
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from tasks_core import (
    attempt_history,
    directory,
    lambda_options,
    limits,
    operations,
    overrides,
    scheduling,
)
from tasks_core.conf import atf_settings
from tasks_core.debounce import KEY_CHARS as FLOW_KEY_CHARS
from tasks_core.exceptions import InvalidTask
from tasks_core.gating import GateState
from tasks_core.models import (
    Collection,
    Lambda,
    PeriodicTask,
    TaskAttempt,
    TaskEntity,
    TaskProgress,
    TaskStep,
    Team,
    Worker,
)
from tasks_core.states import TaskStatus


def _renamed(fields: dict[str, serializers.Field], **names: str) -> dict[str, serializers.Field]:
    """Rename fields, keeping their order ("lambda" is a keyword, so it cannot be declared).

    A renamed field without an explicit source reads and writes its new name.
    """
    return {names.get(name, name): field for name, field in fields.items()}


@extend_schema_field(OpenApiTypes.ANY)
class PayloadField(serializers.JSONField):
    """Any JSON value; scheduling checks its text, depth and size (tasks_core.scheduling)."""

    def to_internal_value(self, data: Any) -> Any:
        try:
            return super().to_internal_value(data)
        except RecursionError:
            self.fail("too_deep")

    default_error_messages = {
        **serializers.JSONField.default_error_messages,
        "too_deep": "Payload is nested too deeply.",
    }


class TimeField(serializers.DateTimeField):
    """An ISO 8601 time a request gives (UTC without an offset), read in UTC and refused
    outside tasks_core.limits.EARLIEST_TIME and LATEST_TIME."""

    def enforce_timezone(self, value: datetime) -> datetime:
        if timezone.is_naive(value):
            value = super().enforce_timezone(value)
        try:
            return limits.in_utc(value)
        except ValueError as exc:
            raise serializers.ValidationError(str(exc)) from None


class StrictSerializer(serializers.Serializer):
    """Refuses fields it does not know, so a misspelt option is an error, not a silent default."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            unknown = sorted(str(key) for key in data if key not in self.fields)
            if unknown:
                raise serializers.ValidationError(
                    {key[:100]: ["Unknown field."] for key in unknown[:20]}
                )
        return super().to_internal_value(data)


# --- tasks -----------------------------------------------------------------------------------


class TaskSerializer(serializers.ModelSerializer):
    """A task as docs/contract.md lists its fields."""

    lambda_name = serializers.SerializerMethodField(method_name="get_lambda_name")
    payload = serializers.JSONField(read_only=True)
    result = serializers.JSONField(read_only=True)
    last_error = serializers.JSONField(read_only=True)
    parents = serializers.SerializerMethodField(help_text="Tasks this one runs after.")
    children = serializers.SerializerMethodField(help_text="Tasks that run after this one.")
    timeout = serializers.FloatField(source="timeout_s", read_only=True, allow_null=True,
                                     help_text="This task's own time limit in seconds, if any.")
    cancel_requested_at = serializers.DateTimeField(
        read_only=True, allow_null=True,
        help_text="When a cancel asked the worker running this task to stop it.")

    class Meta:
        model = TaskEntity
        fields = [
            "id", "lambda_name", "collection", "priority", "status", "payload", "attempts",
            "max_attempts", "run_at", "created_at", "enqueued_at", "started_at", "finished_at",
            "heartbeat_at", "result", "last_error", "idempotency_key", "worker", "parents",
            "children", "timeout", "cancel_requested_at",
        ]
        read_only_fields = fields

    def get_fields(self) -> dict[str, serializers.Field]:
        return _renamed(super().get_fields(), lambda_name="lambda")

    def get_lambda_name(self, task: TaskEntity) -> str:
        return directory.by_id(task.lambda_ref_id).name

    @extend_schema_field(serializers.ListField(child=serializers.IntegerField()))
    def get_parents(self, task: TaskEntity) -> list[int]:
        if (links := getattr(task, NEW_PARENTS, None)) is not None:
            return list(links)
        return [parent.pk for parent in task.parents.all()]

    @extend_schema_field(serializers.ListField(child=serializers.IntegerField()))
    def get_children(self, task: TaskEntity) -> list[int]:
        if hasattr(task, NEW_PARENTS):
            return []
        return [child.pk for child in task.children.all()]


#: Set on a task just created to the parents it was given: it is shown with those and no
#: children, without reading its links back.
NEW_PARENTS = "atf_new_parents"


# Building a serializer's fields costs more than showing or checking one task with them, and
# neither changes anything on the serializer: the two functions below use one shared instance
# of a class per process (its request threads share it).


def show_task(task: TaskEntity) -> dict[str, Any]:
    """`TaskSerializer(task).data`."""
    return _shared(TaskSerializer).to_representation(task)


def validated(form_class: type[serializers.Serializer], data: Any,
              context: dict[str, Any] | None = None) -> Any:
    """`form_class(data=data, context=context)`'s validated data. Invalid data is checked again
    by an instance of its own, with `context`, which raises the usual field errors (400): a
    form whose context changes only what its errors say (ScheduleTaskSerializer's "teams")
    is built only then."""
    try:
        return _shared(form_class).run_validation(data)
    except serializers.ValidationError:
        form = form_class(data=data, context=context or {})
        form.is_valid(raise_exception=True)
        return form.validated_data


@functools.cache
def _shared(serializer_class: type[serializers.Serializer]) -> serializers.Serializer:
    shared = serializer_class()
    _ = shared.fields  # built now, before threads share it
    return shared


class AttemptListSerializer(serializers.ListSerializer):
    """A task's attempts, with the host of each one's worker read in one query."""

    def to_representation(self, data: Any) -> list[Any]:
        attempts = list(data.all() if hasattr(data, "all") else data)
        self.child.hosts = dict(  # type: ignore[union-attr]
            Worker.objects.filter(worker_id__in={a.worker for a in attempts})
            .values_list("worker_id", "host"))
        return super().to_representation(attempts)


class AttemptSerializer(serializers.ModelSerializer):
    """One attempt at a task: who ran it and on which host, when, how it ended and with which
    error."""

    error = serializers.JSONField(read_only=True)
    host = serializers.SerializerMethodField(help_text="The host of the worker that ran it.")

    class Meta:
        model = TaskAttempt
        fields = ["number", "worker", "host", "started_at", "ended_at", "outcome", "error"]
        read_only_fields = fields
        list_serializer_class = AttemptListSerializer

    def get_host(self, attempt: TaskAttempt) -> str:
        return getattr(self, "hosts", {}).get(attempt.worker, "")


SHOWN_ATTEMPTS = limits.SHOWN_ATTEMPTS
#: Where with_latest_attempts() puts a task's latest attempt rows, newest first.
_LATEST_ATTEMPTS = "atf_latest_attempts"


def with_latest_attempts(tasks: QuerySet[TaskEntity]) -> QuerySet[TaskEntity]:
    """`tasks` with their latest SHOWN_ATTEMPTS attempts read in one query, for
    TaskDetailSerializer."""
    latest = TaskAttempt.objects.order_by("-number")[:SHOWN_ATTEMPTS]
    return tasks.prefetch_related(Prefetch("attempt_history", queryset=latest,
                                           to_attr=_LATEST_ATTEMPTS))


#: Steps a task's answer lists.
MAX_SHOWN_STEPS = 1000


class TaskDetailSerializer(TaskSerializer):
    """A task with its latest SHOWN_ATTEMPTS attempts, oldest first (`attempts` stays the count
    of the current run), and the number of all its attempts; rows read by
    with_latest_attempts() show them without a query more."""

    attempt_history = serializers.SerializerMethodField(
        help_text=f"The latest {SHOWN_ATTEMPTS} attempts, oldest first; "
                  "/api/v1/tasks/{id}/attempts/ has all of them.")
    attempt_history_count = serializers.SerializerMethodField(
        help_text="How many attempts the task has had in all (a requeue keeps them).")
    group = serializers.IntegerField(source="group_id", allow_null=True, read_only=True,
                                     help_text="The group it is a member of (/api/v1/groups/).")
    progress = serializers.SerializerMethodField(
        help_text='What it last reported with ctx.progress: {"done", "total", "note", '
                  '"updated_at"}, or null.')
    steps = serializers.SerializerMethodField(
        help_text='Its recorded steps (ctx.step), in order: [{"name", "attempt", '
                  '"recorded_at", "size"}] (size: bytes of the result\'s JSON).')

    class Meta(TaskSerializer.Meta):
        fields = [*TaskSerializer.Meta.fields, "attempt_history", "attempt_history_count",
                  "group", "progress", "steps"]
        read_only_fields = fields

    @extend_schema_field(serializers.DictField(allow_null=True))
    def get_progress(self, task: TaskEntity) -> Any:
        return TaskProgress.objects.filter(task_id=task.pk).values(
            "done", "total", "note", "updated_at").first()

    @extend_schema_field(serializers.ListField(child=serializers.DictField()))
    def get_steps(self, task: TaskEntity) -> list[Any]:
        return list(TaskStep.objects.filter(task_id=task.pk).order_by("pk").values(
            "name", "attempt", "recorded_at", "size")[:MAX_SHOWN_STEPS])

    @staticmethod
    def _latest(task: TaskEntity) -> list[TaskAttempt]:
        """The latest SHOWN_ATTEMPTS attempts, newest first (the one the task's row holds
        included); the rows are read once."""
        rows = getattr(task, _LATEST_ATTEMPTS, None)
        if rows is None:
            rows = list(task.attempt_history.order_by("-number")[:SHOWN_ATTEMPTS])
            setattr(task, _LATEST_ATTEMPTS, rows)
        return attempt_history.newest_first(task, rows)[:SHOWN_ATTEMPTS]

    @extend_schema_field(AttemptSerializer(many=True))
    def get_attempt_history(self, task: TaskEntity) -> Any:
        return AttemptSerializer(self._latest(task)[::-1], many=True).data

    def get_attempt_history_count(self, task: TaskEntity) -> int:
        latest = self._latest(task)
        return len(latest) if len(latest) < SHOWN_ATTEMPTS else attempt_history.count(task)


#: Most tasks on a page that shows payloads or results: 20 of 256 KiB each is 10 MiB at most
#: with the default limits.
BODY_PAGE_SIZE = 20
#: A task's fields that may be large (ATF_MAX_PAYLOAD_BYTES, ATF_MAX_RESULT_BYTES): lists leave
#: them out unless `?fields=` names them.
BODIES = ("payload", "result")


class TaskSummarySerializer(TaskSerializer):
    """A task in a list: without its payload and result, unless the list asks for them
    (`?fields=payload`, `?fields=result`, `?fields=payload,result`; context "bodies")."""

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()
        for name in set(BODIES) - set(self.context.get("bodies", ())):
            del fields[name]
        return fields


class ScheduleTaskSerializer(StrictSerializer):
    """One task to schedule: a scheduling.TaskRequest as JSON. The fields below are its schema;
    TaskRequest.from_json reads a body and tasks_core checks it (one validator, with its
    messages), so `validated_data` is a TaskRequest. Context "teams": the caller's team ids
    (Scope.team_ids), whose lambdas it may name."""

    lambda_name = serializers.CharField(max_length=limits.LAMBDA_NAME_CHARS)
    payload = PayloadField(required=False, allow_null=True)
    collection = serializers.CharField(required=False, max_length=limits.COLLECTION_CHARS)
    priority = serializers.CharField(required=False, max_length=limits.PRIORITY_CHARS,
                                     help_text=f"One of {', '.join(atf_settings.priorities)}.")
    run_at = TimeField(required=False, help_text="ISO 8601; UTC without offset.")
    delay = serializers.FloatField(required=False, min_value=0, max_value=limits.MAX_DELAY_S,
                                   help_text="Seconds from now; not with run_at.")
    idempotency_key = serializers.CharField(required=False,
                                            max_length=limits.idempotency_key_chars())
    max_attempts = serializers.IntegerField(
        required=False, min_value=int(lambda_options.BY_NAME["max_attempts"].least),
        max_value=int(lambda_options.BY_NAME["max_attempts"].most))
    timeout = serializers.FloatField(required=False, min_value=0,
                                     max_value=lambda_options.BY_NAME["timeout"].most,
                                     help_text="Seconds one attempt may run before it ends "
                                               "`timeout`; 0: no limit; default: the lambda's "
                                               "time limit.")
    after = serializers.ListField(child=serializers.IntegerField(min_value=1), required=False,
                                  max_length=limits.MAX_PARENTS,
                                  help_text="Parent task ids: runs once all of them succeeded.")
    # Flow control (tasks_core.debounce checks them).
    limit_key = serializers.CharField(required=False, max_length=FLOW_KEY_CHARS,
                                      help_text="What the lambda's key_concurrency and key_rate "
                                                "count the task under.")
    debounce = serializers.FloatField(required=False, min_value=0,
                                      max_value=limits.MAX_DELAY_S,
                                      help_text="Seconds: due then; scheduling again with the "
                                                "same debounce_key while it waits replaces it.")
    debounce_key = serializers.CharField(required=False, max_length=FLOW_KEY_CHARS)

    def get_fields(self) -> dict[str, serializers.Field]:
        return _renamed(super().get_fields(), lambda_name="lambda")

    def to_internal_value(self, data: Any) -> scheduling.TaskRequest:
        try:
            return scheduling.TaskRequest.from_json(data, teams=self.context.get("teams"))
        except InvalidTask as exc:
            raise serializers.ValidationError(exc.errors) from exc


class ScheduleBatchSerializer(StrictSerializer):
    """Many tasks, all scheduled or none; `validated_data["tasks"]` are TaskRequests. Item
    errors are keyed "tasks[i].field"."""

    tasks = ScheduleTaskSerializer(
        many=True, allow_empty=False,
        help_text="At most ATF_MAX_BATCH_SIZE tasks (1000 by default).")

    def to_internal_value(self, data: Any) -> dict[str, list[scheduling.TaskRequest]]:
        tasks = data.get("tasks") if isinstance(data, Mapping) else None
        if not (isinstance(tasks, list) and tasks and data.keys() == {"tasks"}):
            # Not an object, an unknown field, no list or an empty one: the usual errors.
            return super().to_internal_value(data)
        try:
            return {"tasks": scheduling.requests_from_json(tasks,
                                                           teams=self.context.get("teams"))}
        except InvalidTask as exc:
            raise serializers.ValidationError(exc.errors) from exc


class ListQuerySerializer(StrictSerializer):
    """What every task list takes: its page, and `fields=` to show payloads or results."""

    cursor = serializers.CharField(required=False)
    page_size = serializers.CharField(required=False)
    # Declared under another name: a serializer's `fields` attribute is taken.
    extra_fields = serializers.ChoiceField(
        required=False, choices=["payload", "result", "payload,result"],
        help_text="show each task's payload, result or both (lists leave them out); a page "
                  f"that shows them holds at most {BODY_PAGE_SIZE} tasks.")

    def get_fields(self) -> dict[str, serializers.Field]:
        return _renamed(super().get_fields(), lambda_name="lambda", extra_fields="fields")


class AttemptsQuerySerializer(ListQuerySerializer):
    """The query of a task's attempts: its page."""

    extra_fields = None  # type: ignore[assignment]


class TaskFilterSerializer(ListQuerySerializer):
    """The query of a task list."""

    lambda_name = serializers.CharField(required=False, max_length=limits.LAMBDA_NAME_CHARS)
    collection = serializers.CharField(required=False, max_length=limits.COLLECTION_CHARS)
    status = serializers.ChoiceField(required=False, choices=[s.value for s in TaskStatus])
    priority = serializers.CharField(required=False, max_length=limits.PRIORITY_CHARS)
    worker = serializers.CharField(required=False, max_length=200,
                                   help_text="A worker's id: the tasks it runs or ran.")

    def filters(self) -> Q:
        """The ORM filter of the validated query."""
        fields = {"lambda": "lambda_ref__name", "collection": "collection",
                  "status": "status", "priority": "priority"}
        query = Q(**{fields[key]: value for key, value in self.validated_data.items()
                     if key in fields})
        if "worker" in self.validated_data:
            query &= operations.worked_by(self.validated_data["worker"])
        return query


# --- lambdas, collections, gates -------------------------------------------------------------


class GateSerializer(StrictSerializer):
    state = serializers.ChoiceField(choices=[s.value for s in GateState])
    until = TimeField(required=False, allow_null=True,
                      help_text="ISO 8601; a closed gate reopens by itself then.")


class CollectionSerializer(serializers.ModelSerializer):
    lambda_name = serializers.CharField(source="lambda_ref.name", read_only=True)

    class Meta:
        model = Collection
        fields = ["lambda_name", "name", "gate", "gate_until"]
        read_only_fields = fields

    def get_fields(self) -> dict[str, serializers.Field]:
        return _renamed(super().get_fields(), lambda_name="lambda")


class LambdaCollectionSerializer(serializers.ModelSerializer):
    class Meta:
        model = Collection
        fields = ["name", "gate", "gate_until"]
        read_only_fields = fields


class OptionValueSerializer(serializers.Serializer):
    """One option of a lambda: the value in effect and where it comes from."""

    value = serializers.FloatField(allow_null=True, help_text="null: none (no limit)")
    # The serializer's metaclass moves declared fields out of the class body, so this field
    # never shadows Field.source at run time; the stubs cannot see that.
    source = serializers.ChoiceField(  # type: ignore[assignment]
        choices=[overrides.CODE, overrides.OPERATOR])
    code_value = serializers.FloatField(allow_null=True,
                                        help_text="The code's value, which applies when the "
                                                  "override is cleared.")
    changed_by = serializers.CharField(required=False, help_text="Operator values only.")
    changed_at = serializers.DateTimeField(required=False, help_text="Operator values only.")


@extend_schema_field(OptionValueSerializer)
class OptionField(serializers.Field):
    """One option of the lambda row, resolved by tasks_core.overrides."""

    def __init__(self, option: overrides.Option) -> None:
        super().__init__(source="*", read_only=True, help_text=option.text)
        self.option = option

    def to_representation(self, row: Lambda) -> dict[str, Any]:
        item = overrides.resolve(row)[self.option.name]
        shown: dict[str, Any] = {"value": item.value, "source": item.source,
                                 "code_value": item.code_value}
        if item.source == overrides.OPERATOR:
            shown["changed_by"] = item.changed_by
            shown["changed_at"] = (None if item.changed_at is None else
                                   serializers.DateTimeField().to_representation(item.changed_at))
        return shown


@extend_schema_field({"oneOf": [{"type": "number"}, {"type": "string"}], "nullable": True,
                      "description": 'A number; a rate also as "N/s", "N/m" or "N/h".'})
class OverrideValueField(serializers.Field):
    """A new operator value, checked by tasks_core.overrides; null clears the override."""

    def to_internal_value(self, data: Any) -> Any:
        return data


class LambdaOverridesSerializer(StrictSerializer):
    """PATCH of a lambda: any of its options; a number sets an override, null clears it."""

    def get_fields(self) -> dict[str, serializers.Field]:
        return {option.name: OverrideValueField(required=False, allow_null=True,
                                                help_text=option.text)
                for option in overrides.OPTIONS}


class BusyKeySerializer(serializers.Serializer):
    key = serializers.CharField()
    running = serializers.IntegerField()
    held = serializers.IntegerField()


class FlowSerializer(serializers.Serializer):
    """A lambda's flow control now (tasks_core.flow.summary); the limits themselves are its
    options (`concurrency`, `rate`, `key_concurrency`, `key_rate`)."""

    rate = serializers.CharField(allow_null=True, help_text='The rate option as "N/s|m|h".')
    key_rate = serializers.CharField(allow_null=True, help_text='key_rate as "N/s|m|h".')
    held = serializers.IntegerField(help_text="Tasks a limit holds back now.")
    refused = serializers.DictField(child=serializers.IntegerField(),
                                    help_text="Starts refused so far, by limit.")
    busiest_keys = BusyKeySerializer(many=True, help_text="Limit keys with the most tasks "
                                                          "running or held (keyed limits).")


class LambdaSerializer(serializers.ModelSerializer):
    """A lambda with its gate, its options, its collections' gates, queue depths and counts.

    The view passes `depths` (name -> priority -> n, or None when the queues are unreachable)
    `counts` (name -> status -> n) and `ages` (name -> priority -> seconds the oldest task
    waiting in the queue has waited) in the context, computed once for all lambdas shown.
    Each option is `{"value", "source", "code_value"}`, plus who changed an operator's value
    and when; rows come with their "overrides" prefetched.
    """

    team = serializers.CharField(source="team.name", read_only=True)
    collections = LambdaCollectionSerializer(many=True, read_only=True)
    queue_depth = serializers.SerializerMethodField()
    queue_age_s = serializers.SerializerMethodField()
    counts = serializers.SerializerMethodField()
    flow = serializers.SerializerMethodField()

    class Meta:
        model = Lambda
        fields = ["name", "team", "gate", "gate_until", "in_code", "collections", "queue_depth",
                  "queue_age_s", "counts", "flow"]
        read_only_fields = fields

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()
        fields.update({option.name: OptionField(option) for option in overrides.OPTIONS})
        return fields

    @extend_schema_field(serializers.DictField(child=serializers.IntegerField(), allow_null=True))
    def get_queue_depth(self, row: Lambda) -> dict[str, int] | None:
        depths = self.context.get("depths")
        return None if depths is None else depths.get(row.name)

    @extend_schema_field(serializers.DictField(child=serializers.FloatField()))
    def get_queue_age_s(self, row: Lambda) -> dict[str, float]:
        return self.context.get("ages", {}).get(row.name, {})

    @extend_schema_field(FlowSerializer(allow_null=True))
    def get_flow(self, row: Lambda) -> dict[str, Any] | None:
        """The view passes `flow` (lambda id -> tasks_core.flow.summary) in the context."""
        return self.context.get("flow", {}).get(row.pk)

    @extend_schema_field(serializers.DictField(child=serializers.IntegerField()))
    def get_counts(self, row: Lambda) -> dict[str, int]:
        found = self.context.get("counts", {}).get(row.name, {})
        return {status.value: found.get(status.value, 0) for status in TaskStatus}


# --- periodic tasks --------------------------------------------------------------------------


class PeriodicTaskSerializer(serializers.ModelSerializer):
    """A periodic task as the API shows it."""

    lambda_name = serializers.CharField(source="lambda_ref.name", read_only=True)
    team: serializers.SlugRelatedField[Team] = serializers.SlugRelatedField(
        slug_field="name", read_only=True)
    payload = serializers.JSONField(read_only=True)
    interval = serializers.FloatField(source="interval_s", read_only=True, allow_null=True,
                                      help_text="seconds between two runs")

    class Meta:
        model = PeriodicTask
        fields = ["name", "lambda_name", "team", "cron", "interval", "interval_s", "timezone",
                  "payload", "collection", "priority", "catch_up", "enabled", "in_code",
                  "next_run_at", "last_run_at", "last_error"]
        read_only_fields = fields
        extra_kwargs = {"interval_s": {"help_text": "Deprecated: the same as `interval`."}}

    def get_fields(self) -> dict[str, serializers.Field]:
        return _renamed(super().get_fields(), lambda_name="lambda")


class PeriodicTaskWriteSerializer(StrictSerializer):
    """A periodic task to create (name, lambda and one timing required) or change (PATCH: any
    field but the name). tasks_core.periodic checks timing, lambda, payload and priority."""

    name = serializers.CharField(max_length=200)
    lambda_name = serializers.CharField(max_length=limits.LAMBDA_NAME_CHARS)
    cron = serializers.CharField(required=False, allow_blank=True, allow_null=True,
                                 max_length=100, help_text='e.g. "*/5 * * * *"')
    interval = serializers.FloatField(source="interval_s", required=False, allow_null=True,
                                      help_text="seconds between two runs (1 or more); "
                                                "`interval_s` is its older name")
    timezone = serializers.CharField(required=False, max_length=64,
                                     help_text='the cron\'s time zone, e.g. "Europe/Paris"')
    payload = PayloadField(required=False, allow_null=True)
    collection = serializers.CharField(required=False, max_length=limits.COLLECTION_CHARS)
    priority = serializers.CharField(required=False, max_length=limits.PRIORITY_CHARS)
    catch_up = serializers.ChoiceField(required=False, choices=PeriodicTask.CatchUp.choices)
    enabled = serializers.BooleanField(required=False)

    def get_fields(self) -> dict[str, serializers.Field]:
        return _renamed(super().get_fields(), lambda_name="lambda")

    def validate_name(self, name: str) -> str:
        if self.instance is not None and name != self.instance.name:
            raise serializers.ValidationError("The name of a periodic task cannot change.")
        return name

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if "cron" in attrs:
            attrs["cron"] = attrs["cron"] or ""
        if attrs.get("payload", {}) is None:
            attrs["payload"] = {}
        return attrs


# --- dead letters ------------------------------------------------------------------------------


class DeadLetterFilterSerializer(ListQuerySerializer):
    lambda_name = serializers.CharField(required=False, max_length=limits.LAMBDA_NAME_CHARS)
    collection = serializers.CharField(required=False, max_length=limits.COLLECTION_CHARS)


class DeadLetterSelectSerializer(DeadLetterFilterSerializer):
    """Which dead tasks to requeue or discard: `ids`, or all of a `lambda` (and `collection`).

    The rule that one of them is given is the operations module's (tasks_core.operations).
    """

    ids = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=limits.MAX_TASK_ID),
        required=False, allow_empty=False, max_length=limits.MAX_IDS)
    # None removes a field declared on the base serializer (DRF's way; the stubs cannot see it).
    cursor = None  # type: ignore[assignment]
    page_size = None  # type: ignore[assignment]
    extra_fields = None  # type: ignore[assignment]


class CountSerializer(serializers.Serializer):
    requeued = serializers.IntegerField(required=False)
    discarded = serializers.IntegerField(required=False)


# --- stats -----------------------------------------------------------------------------------


class StatsQuerySerializer(StrictSerializer):
    minutes = serializers.IntegerField(required=False, min_value=1, max_value=1440, default=15,
                                       help_text="The recent window, in minutes.")


class LatencySerializer(serializers.Serializer):
    count = serializers.IntegerField()
    p50_s = serializers.FloatField(allow_null=True)
    p95_s = serializers.FloatField(allow_null=True)
    p99_s = serializers.FloatField(allow_null=True)


class MinuteSerializer(serializers.Serializer):
    minute = serializers.DateTimeField()
    finished = serializers.IntegerField()


class ThroughputSerializer(serializers.Serializer):
    per_minute = serializers.FloatField()
    minutes = MinuteSerializer(many=True)


class StatsSerializer(serializers.Serializer):
    """The answer of /api/v1/stats/ (see tasks_core.stats.Snapshot)."""

    window_s = serializers.FloatField()
    counts = serializers.DictField(child=serializers.IntegerField())
    counts_by_lambda = serializers.DictField(
        child=serializers.DictField(child=serializers.IntegerField()))
    queue_depths = serializers.DictField(
        child=serializers.DictField(child=serializers.IntegerField()), allow_null=True)
    throughput = ThroughputSerializer()
    delivery_latency = LatencySerializer()
    failures_by_lambda = serializers.DictField(child=serializers.IntegerField())
    live_workers = serializers.IntegerField()
