"""Groups over REST: `POST /api/v1/groups/` schedules one, `GET /api/v1/groups/{id}/` follows
it. A caller sees only its teams' groups (a group's team: its first member's lambda's)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers, status, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from tasks_api import schedule_rate
from tasks_api.openapi import extend_schema
from tasks_api.policy import ApiPolicy
from tasks_api.serializers import ScheduleTaskSerializer, StrictSerializer, validated
from tasks_core import groups, shards
from tasks_core.access import Scope
from tasks_core.exceptions import TaskNotFound
from tasks_core.models import TaskGroup


class ScheduleGroupSerializer(StrictSerializer):
    """A group to schedule, all or none: its members and callbacks as tasks are scheduled.
    Errors are keyed "tasks[i].field", "then.field" and "on_failure.field"."""

    tasks = ScheduleTaskSerializer(many=True, allow_empty=False,
                                   help_text=f"At most {groups.MAX_MEMBERS} tasks.")
    then = ScheduleTaskSerializer(required=False, allow_null=True,
                                  help_text="Runs once, after every member succeeded.")
    on_failure = ScheduleTaskSerializer(required=False, allow_null=True,
                                        help_text="Runs once, when a member ended "
                                                  "fatal_failure, dead, cancelled or dropped.")

    def to_internal_value(self, data: Any) -> groups.GroupRequest:
        if not (isinstance(data, Mapping) and isinstance(data.get("tasks"), list)
                and data["tasks"] and set(data) <= {"tasks", "then", "on_failure"}):
            return super().to_internal_value(data)  # the usual errors of the shape
        return groups.GroupRequest(data["tasks"], then=data.get("then"),
                                   on_failure=data.get("on_failure"))


class GroupSerializer(serializers.ModelSerializer[TaskGroup]):
    """A group: its status, its members' ids (in order) and counts by status, its callbacks."""

    tasks = serializers.SerializerMethodField()
    counts = serializers.SerializerMethodField()
    then = serializers.IntegerField(source="then_id", allow_null=True, read_only=True)
    on_failure = serializers.IntegerField(source="on_failure_id", allow_null=True,
                                          read_only=True)

    class Meta:
        model = TaskGroup
        fields = ["id", "status", "total", "succeeded", "failed", "counts", "tasks", "then",
                  "on_failure", "created_at", "finished_at"]

    @extend_schema_field(serializers.ListField(child=serializers.IntegerField()))
    def get_tasks(self, group: TaskGroup) -> list[int]:
        """The members' ids in order, the first `MEMBERS_SHOWN` of them."""
        return list(group.members.order_by("pk").values_list("pk", flat=True)[:MEMBERS_SHOWN])

    @extend_schema_field(serializers.DictField(child=serializers.IntegerField()))
    def get_counts(self, group: TaskGroup) -> dict[str, int]:
        return groups.member_counts(group)


#: Member ids a group's answer lists (`GET /api/v1/tasks/?group=` is not offered: the
#: console's group page and the counts cover the rest).
MEMBERS_SHOWN = 1000


@extend_schema(tags=["groups"])
class GroupViewSet(ApiPolicy, viewsets.ViewSet):
    """Schedule groups of tasks with callbacks, and follow them."""

    lookup_value_regex = "[0-9]{1,18}"

    @extend_schema(request=ScheduleGroupSerializer, responses={201: GroupSerializer})
    def create(self, request: Request) -> Response:
        scope = Scope.of(request.user)
        asked = validated(ScheduleGroupSerializer, request.data, {"teams": scope.team_ids})
        schedule_rate.take(request, len(asked.tasks) + 2)
        parents = [pk for item in asked.tasks if isinstance(item, Mapping)
                   and isinstance(after := item.get("after"), list)
                   for pk in after if type(pk) is int]
        scope.check_may_follow(parents)
        group = groups.schedule(asked, teams=scope.team_ids)
        with shards.on(group.pk):
            return Response(GroupSerializer(group).data, status=status.HTTP_201_CREATED)

    @extend_schema(responses={200: GroupSerializer})
    def retrieve(self, request: Request, pk: str) -> Response:
        with shards.on(int(pk)):  # a group lives on its members' shard, its id says which
            group = Scope.of(request.user).filter(TaskGroup.objects.all(), "team") \
                .filter(pk=int(pk)).first()
            if group is None:
                raise TaskNotFound(f"no group {pk}")
            return Response(GroupSerializer(group).data)

