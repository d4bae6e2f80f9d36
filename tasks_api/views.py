"""Thin views: validate with a serializer, make one call into tasks_core, answer."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

from django.db.models import QuerySet
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from tasks_api import renamed_fields, schedule_rate, serializers
from tasks_api.openapi import extend_schema
from tasks_api.pagination import AttemptCursorPagination, TaskCursorPagination
from tasks_api.policy import ApiPolicy
from tasks_core import (
    attempt_history,
    flow,
    limits,
    operations,
    periodic,
    queue_age,
    scheduling,
    shards,
    stats,
)
from tasks_core.access import Scope
from tasks_core.exceptions import InvalidTask, QueueUnavailable
from tasks_core.models import Collection, Lambda, PeriodicTask, TaskEntity
from tasks_core.states import TaskStatus

logger = logging.getLogger(__name__)

_Form = TypeVar("_Form", bound=serializers.StrictSerializer)
_Row = TypeVar("_Row")

_ERRORS = {
    400: OpenApiResponse(OpenApiTypes.OBJECT, description="Field errors or a bad request."),
    401: OpenApiResponse(OpenApiTypes.OBJECT, description="No or bad credentials."),
    403: OpenApiResponse(OpenApiTypes.OBJECT, description="Not allowed."),
    404: OpenApiResponse(OpenApiTypes.OBJECT, description="Not found, or not yours."),
    409: OpenApiResponse(OpenApiTypes.OBJECT, description="Conflicts with the task's status."),
    413: OpenApiResponse(OpenApiTypes.OBJECT, description="Request body too large."),
    415: OpenApiResponse(OpenApiTypes.OBJECT, description="Not JSON."),
    429: OpenApiResponse(OpenApiTypes.OBJECT, description="Throttled; see Retry-After."),
    503: OpenApiResponse(OpenApiTypes.OBJECT, description="Database or queue unavailable."),
}


def _errors(*codes: int) -> dict[int, OpenApiResponse]:
    return {code: _ERRORS[code] for code in (401, 429, 503, *codes)}


def _clean_path_value(value: str, *, max_length: int = 200) -> str:
    """A name taken from the URL; 404 for text no row can hold (NUL, lone surrogates, length)."""
    if limits.bad_text(value) or len(value) > max_length:
        raise NotFound("Not found.")
    return value


def _query(serializer_class: type[_Form], request: Request) -> _Form:
    form = serializer_class(data=request.query_params.dict())
    form.is_valid(raise_exception=True)
    return form


class PayloadOnRequest(viewsets.GenericViewSet[TaskEntity]):
    """Lists leave payloads and results out (a page of big ones is huge) unless `?fields=`
    names them; such a page holds at most serializers.BODY_PAGE_SIZE tasks."""

    def get_serializer_class(self) -> type[serializers.TaskSerializer]:
        if self.action == "list":
            return serializers.TaskSummarySerializer
        return serializers.TaskSerializer

    def get_serializer_context(self) -> dict[str, Any]:
        return {**super().get_serializer_context(), "bodies": list_bodies(self.request)}


def list_bodies(request: Request) -> list[str]:
    """The large fields (payload, result) a list request asks for with `?fields=`."""
    asked = request.query_params.get("fields", "").split(",")
    return [name for name in serializers.BODIES if name in asked]


# --- tasks -----------------------------------------------------------------------------------


@extend_schema(tags=["tasks"])
class TaskViewSet(ApiPolicy, PayloadOnRequest, mixins.ListModelMixin,
                  mixins.RetrieveModelMixin, viewsets.GenericViewSet[TaskEntity]):
    """Schedule tasks and follow them. A caller sees only its teams' tasks."""

    serializer_class = serializers.TaskSerializer
    pagination_class = TaskCursorPagination
    lookup_value_regex = "[0-9]{1,18}"

    def get_queryset(self) -> QuerySet[TaskEntity]:
        tasks = Scope.of(self.request.user).tasks().prefetch_related("parents", "children")
        return serializers.with_latest_attempts(tasks) if self.action == "retrieve" else tasks

    def get_object(self) -> TaskEntity:
        with shards.on(int(self.kwargs["pk"])):  # the id says its shard
            return super().get_object()

    def get_serializer_class(self) -> type[serializers.TaskSerializer]:
        if self.action == "retrieve":
            return serializers.TaskDetailSerializer
        return super().get_serializer_class()

    def filter_queryset(self, queryset: QuerySet[TaskEntity, _Row]) -> QuerySet[TaskEntity, _Row]:
        if self.action != "list":
            return queryset
        return queryset.filter(_query(serializers.TaskFilterSerializer, self.request).filters())

    @extend_schema(parameters=[serializers.TaskFilterSerializer], responses={
        200: serializers.TaskSummarySerializer(many=True), **_errors(400, 404)})
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().list(request, *args, **kwargs)

    @extend_schema(responses={200: serializers.TaskDetailSerializer, **_errors(404)})
    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().retrieve(request, *args, **kwargs)

    @extend_schema(request=serializers.ScheduleTaskSerializer, responses={
        201: serializers.TaskSerializer, 200: serializers.TaskSerializer,
        **_errors(400, 403, 409, 413, 415, 429)})
    def create(self, request: Request) -> Response:
        schedule_rate.take(request, 1)
        asked = serializers.validated(serializers.ScheduleTaskSerializer, request.data,
                                      _teams(request))
        task, created = operations.schedule(Scope.of(request.user), asked)
        if not created:
            return Response(_shown([task])[0], status=status.HTTP_200_OK)
        # Everything about a task just created is at hand: no need to read it back.
        setattr(task, serializers.NEW_PARENTS, asked.after)
        return Response(serializers.show_task(task), status=status.HTTP_201_CREATED)

    @extend_schema(request=serializers.ScheduleBatchSerializer, responses={
        201: serializers.ScheduleBatchSerializer(read_only=True),
        **_errors(400, 403, 409, 413, 415, 429)})
    @action(detail=False, methods=["post"])
    def batch(self, request: Request) -> Response:
        schedule_rate.take(request, schedule_rate.tasks_in_batch(request.data))
        asked = serializers.validated(serializers.ScheduleBatchSerializer, request.data,
                                      _teams(request))["tasks"]
        tasks = operations.schedule_many(Scope.of(request.user), asked)
        for one, task in zip(asked, tasks, strict=True):
            if one.idempotency_key is None:  # a new task: shown as scheduled, not read back
                setattr(task, serializers.NEW_PARENTS, one.after)
        return Response({"tasks": _shown(tasks)}, status=status.HTTP_201_CREATED)

    @extend_schema(request=None,
                   responses={200: serializers.TaskDetailSerializer,
                              202: serializers.TaskDetailSerializer, **_errors(404, 409)})
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str) -> Response:
        """Cancel a task: 200 once it is `cancelled` (it was new, waiting, enqueued, retrying
        or claimed); 202 while its worker is being asked to stop it (it was running, and
        ends `cancelled`); 409 when it had finished."""
        task = operations.cancel(Scope.of(request.user), int(pk))
        being_stopped = task.status == TaskStatus.PROCESSING
        return _detail(task, status.HTTP_202_ACCEPTED if being_stopped else status.HTTP_200_OK)

    @extend_schema(parameters=[serializers.AttemptsQuerySerializer], responses={
        200: serializers.AttemptSerializer(many=True), **_errors(400, 404)})
    @action(detail=True, methods=["get"], pagination_class=AttemptCursorPagination)
    def attempts(self, request: Request, pk: str) -> Response:
        """All the attempts at a task, oldest first, a page at a time (the task's answer shows
        only its latest)."""
        _query(serializers.AttemptsQuerySerializer, request)
        task = operations.task(Scope.of(request.user), int(pk))
        pages = AttemptCursorPagination()
        page = list(pages.paginate_queryset(task.attempt_history.all(), request, view=self) or [])
        if not pages.has_next:  # the last page ends with the attempt the task's row holds
            newest = task.attempt_history.order_by("-number").first()
            page = pages.last_page_ends_with(page, attempt_history.implied(task, newest))
        return pages.get_paginated_response(serializers.AttemptSerializer(page, many=True).data)

    @extend_schema(request=None,
                   responses={200: serializers.TaskDetailSerializer, **_errors(404, 409)})
    @action(detail=True, methods=["post"])
    def requeue(self, request: Request, pk: str) -> Response:
        """Put a task that ended without success (fatal_failure, dead, cancelled, dropped)
        back to new with its attempts reset; 409 otherwise."""
        return _detail(operations.requeue(Scope.of(request.user), int(pk)))

    @extend_schema(request=None,
                   responses={200: serializers.TaskDetailSerializer, **_errors(404, 409)})
    @action(detail=True, methods=["post"], url_path="run-now", url_name="run-now")
    def run_now(self, request: Request, pk: str) -> Response:
        """Make a delayed (new, due later) or retrying task due now; 409 otherwise."""
        return _detail(operations.run_now(Scope.of(request.user), int(pk)))


def _teams(request: Request) -> dict[str, Any]:
    """The context of a schedule request's serializer: the caller's teams."""
    return {"teams": Scope.of(request.user).team_ids}


def _detail(task: TaskEntity, code: int = status.HTTP_200_OK) -> Response:
    """A task with its links and attempt history, read back in one round of queries."""
    shown = serializers.with_latest_attempts(TaskEntity.objects.prefetch_related("parents",
                                                                                 "children"))
    with shards.on(task.pk):
        return Response(serializers.TaskDetailSerializer(shown.get(pk=task.pk)).data,
                        status=code)


def _shown(tasks: Sequence[TaskEntity]) -> list[dict[str, Any]]:
    """Tasks as the API shows them; those not just created (without serializers.NEW_PARENTS)
    read back in one round of queries, links included."""
    earlier = [t.pk for t in tasks if not hasattr(t, serializers.NEW_PARENTS)]
    fresh = {t.pk: t for part in shards.each(earlier) if part
             for t in TaskEntity.objects.prefetch_related("parents", "children")
             .filter(pk__in=part)}
    return [serializers.show_task(fresh.get(t.pk, t)) for t in tasks]


# --- lambdas and collections ------------------------------------------------------------------


def _lambda_context(rows: Iterable[Lambda]) -> dict[str, Any]:
    """Queue depths and ages and task counts of `rows`, computed once for all of them."""
    rows = list(rows)
    try:
        depths: dict[str, dict[str, int]] | None = stats.queue_depths([r.name for r in rows])
    except QueueUnavailable as exc:
        logger.warning("queue depths unavailable: %s", exc)
        depths = None
    counts = stats.status_counts_by_lambda(lambda_ids=[r.pk for r in rows])
    ages = queue_age.oldest_waiting_s(now=timezone.now(), lambda_ids=[r.pk for r in rows])
    return {"depths": depths, "counts": counts, "ages": ages}


@extend_schema(tags=["lambdas"])
class LambdaViewSet(ApiPolicy, viewsets.ReadOnlyModelViewSet):
    """Lambdas with their gates, collections, queue depths and task counts."""

    serializer_class = serializers.LambdaSerializer
    lookup_field = "name"
    lookup_value_regex = "[^/]+"
    pagination_class = None

    def get_queryset(self) -> QuerySet[Lambda]:
        return (Scope.of(self.request.user).lambdas().select_related("team")
                .prefetch_related("collections", "overrides").order_by("name"))

    def get_object(self) -> Lambda:
        _clean_path_value(self.kwargs["name"])
        return super().get_object()

    def _show(self, *rows: Lambda) -> Any:
        context = {**_lambda_context(rows), "flow": flow.summary([row.pk for row in rows])}
        return serializers.LambdaSerializer(rows, many=True, context=context).data

    @extend_schema(responses={200: serializers.LambdaSerializer(many=True), **_errors()})
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return Response(self._show(*self.get_queryset()))

    @extend_schema(responses={200: serializers.LambdaSerializer, **_errors(404)})
    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return Response(self._show(self.get_object())[0])

    @extend_schema(request=serializers.LambdaOverridesSerializer,
                   responses={200: serializers.LambdaSerializer, **_errors(400, 404, 415)})
    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Set operator overrides of the lambda's options (null clears one)."""
        row = self.get_object()
        form = serializers.LambdaOverridesSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        operations.set_options(Scope.of(request.user), row.name, form.validated_data,
                               by=request.user.get_username())
        return Response(self._show(self.get_queryset().get(pk=row.pk))[0])

    @extend_schema(request=serializers.GateSerializer,
                   responses={200: serializers.LambdaSerializer, **_errors(400, 404, 415)})
    @action(detail=True, methods=["post"])
    def gate(self, request: Request, name: str) -> Response:
        row = self.get_object()
        form = serializers.GateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        operations.gate(Scope.of(request.user), row.name, form.validated_data["state"],
                        until=form.validated_data.get("until"))
        return Response(self._show(self.get_queryset().get(pk=row.pk))[0])

    @extend_schema(request=serializers.GateSerializer,
                   responses={200: serializers.CollectionSerializer, **_errors(400, 404, 415)})
    @action(detail=True, methods=["post"], url_path="collections/(?P<collection>[^/]+)/gate",
            url_name="collection-gate")
    def collection_gate(self, request: Request, name: str, collection: str) -> Response:
        row = self.get_object()
        _clean_path_value(collection, max_length=100)
        form = serializers.GateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        gated = operations.gate(Scope.of(request.user), row.name, form.validated_data["state"],
                                collection=collection, until=form.validated_data.get("until"))
        shown = Collection.objects.select_related("lambda_ref").get(pk=gated.pk)
        return Response(serializers.CollectionSerializer(shown).data)


# --- periodic tasks --------------------------------------------------------------------------


@extend_schema(tags=["periodic tasks"])
class PeriodicTaskViewSet(ApiPolicy, mixins.ListModelMixin, mixins.RetrieveModelMixin,
                          viewsets.GenericViewSet):
    """Schedules that run a lambda on a cron expression or every N seconds: the caller's
    teams' own. Those defined in code are read-only here."""

    serializer_class = serializers.PeriodicTaskSerializer
    lookup_field = "name"
    lookup_value_regex = ".+"  # names may hold "/" (a cron's "*/5")
    pagination_class = None

    def get_queryset(self) -> QuerySet[PeriodicTask]:
        return Scope.of(self.request.user).periodic_tasks().select_related(
            "lambda_ref", "team").order_by("name", "team__name")

    def get_object(self) -> PeriodicTask:
        """The caller's periodic task of that name; names are unique within a team, so a
        member of several teams names the team (`?team=`) when two of them use it."""
        rows = self.get_queryset().filter(name=_clean_path_value(self.kwargs["name"]))
        if team := self.request.query_params.get("team"):
            rows = rows.filter(team__name=_clean_path_value(team, max_length=100))
        found = list(rows[:2])
        if not found:
            raise NotFound("Not found.")
        if len(found) > 1:
            raise ValidationError({"team": [
                "Several of your teams have a periodic task of that name: add ?team=."]})
        return found[0]

    def _save(self, request: Request, row: PeriodicTask, code: int) -> Response:
        body, used = renamed_fields.accept(request.data, renamed_fields.PERIODIC)
        form = serializers.PeriodicTaskWriteSerializer(
            row if row.pk else None, data=body, partial=row.pk is not None)
        if not form.is_valid():
            raise ValidationError(renamed_fields.renamed(form.errors, used))
        changes = dict(form.validated_data)
        name = changes.pop("name", None)
        if row.pk is None:
            row.name = name  # taken or not in the lambda's team: periodic.check_row says
        if "lambda" in changes:
            lambda_name = changes.pop("lambda")
            # Another team's lambda is answered as an unknown one: its name is not confirmed.
            found = Scope.of(request.user).lambdas().filter(name=lambda_name).first()
            if found is None:
                raise ValidationError({"lambda": [scheduling.unknown_lambda(lambda_name)]})
            changes["lambda_ref"] = found
        try:
            saved = operations.save_periodic(Scope.of(request.user), row, changes)
        except InvalidTask as exc:  # keyed by model field: the API's names, as the request gave
            errors = renamed_fields.renamed(exc.errors, {"interval_s": "interval"})
            raise InvalidTask(renamed_fields.renamed(errors, used)) from None
        return renamed_fields.mark(
            Response(serializers.PeriodicTaskSerializer(saved).data, status=code), used)

    @extend_schema(responses={200: serializers.PeriodicTaskSerializer(many=True), **_errors()})
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().list(request, *args, **kwargs)

    @extend_schema(responses={200: serializers.PeriodicTaskSerializer, **_errors(404)})
    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().retrieve(request, *args, **kwargs)

    @extend_schema(request=serializers.PeriodicTaskWriteSerializer, responses={
        201: serializers.PeriodicTaskSerializer, **_errors(400, 403, 409, 415)})
    def create(self, request: Request) -> Response:
        return self._save(request, PeriodicTask(), status.HTTP_201_CREATED)

    @extend_schema(request=serializers.PeriodicTaskWriteSerializer, responses={
        200: serializers.PeriodicTaskSerializer, **_errors(400, 403, 404, 409, 415)})
    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return self._save(request, self.get_object(), status.HTTP_200_OK)

    @extend_schema(responses={204: None, **_errors(404, 409)})
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        periodic.delete_row(self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- dead letters ----------------------------------------------------------------------------


@extend_schema(tags=["dead letters"])
class DeadLetterViewSet(ApiPolicy, PayloadOnRequest, mixins.ListModelMixin,
                        viewsets.GenericViewSet):
    """Tasks whose attempts ran out: list them, requeue them (back to new) or discard them."""

    serializer_class = serializers.TaskSerializer
    pagination_class = TaskCursorPagination

    def get_queryset(self) -> QuerySet[TaskEntity]:
        if self.action != "list":
            return TaskEntity.objects.none()
        query = _query(serializers.DeadLetterFilterSerializer, self.request).validated_data
        return operations.dead_letters(
            Scope.of(self.request.user), lambda_name=query.get("lambda"),
            collection=query.get("collection"), listing=True).select_related("lambda_ref")

    def _selected(self, request: Request) -> QuerySet[TaskEntity]:
        form = serializers.DeadLetterSelectSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        selection = form.validated_data
        return operations.dead_letters(Scope.of(request.user), ids=selection.get("ids"),
                                       lambda_name=selection.get("lambda"),
                                       collection=selection.get("collection"))

    @extend_schema(parameters=[serializers.DeadLetterFilterSerializer], responses={
        200: serializers.TaskSummarySerializer(many=True), **_errors(400, 404)})
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().list(request, *args, **kwargs)

    @extend_schema(request=serializers.DeadLetterSelectSerializer,
                   responses={200: serializers.CountSerializer, **_errors(400, 415)})
    @action(detail=False, methods=["post"])
    def requeue(self, request: Request) -> Response:
        done = operations.requeue_many(Scope.of(request.user), self._selected(request),
                                       statuses=[TaskStatus.DEAD])
        return Response({"requeued": done.changed})

    @extend_schema(request=serializers.DeadLetterSelectSerializer,
                   responses={200: serializers.CountSerializer, **_errors(400, 415)})
    @action(detail=False, methods=["post"])
    def discard(self, request: Request) -> Response:
        done = operations.discard_many(Scope.of(request.user), self._selected(request))
        return Response({"discarded": done.changed})


# --- stats -----------------------------------------------------------------------------------


class StatsView(ApiPolicy, APIView):
    """Counts, queue depths, throughput and delivery latency of the caller's lambdas."""

    @extend_schema(tags=["stats"], parameters=[serializers.StatsQuerySerializer],
                   responses={200: serializers.StatsSerializer, **_errors(400)})
    def get(self, request: Request) -> Response:
        minutes = _query(serializers.StatsQuerySerializer, request).validated_data["minutes"]
        snap = stats.snapshot(now=timezone.now(), window_s=minutes * 60.0,
                              lambda_ids=Scope.of(request.user).lambda_ids())
        return Response(serializers.StatsSerializer({
            "window_s": snap.window_s,
            "counts": snap.counts,
            "counts_by_lambda": snap.counts_by_lambda,
            "queue_depths": snap.queue_depths,
            "throughput": {"per_minute": snap.per_minute,
                           "minutes": [{"minute": m, "finished": n} for m, n in snap.throughput]},
            "delivery_latency": snap.latency,
            "failures_by_lambda": snap.failures_by_lambda,
            "live_workers": snap.live_workers,
        }).data)

