"""Groups over REST: `POST /api/v1/groups/` schedules one, `GET /api/v1/groups/{id}/` follows
it. A caller sees only its teams' groups (a group's team: its first member's lambda's)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema_field
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


class ChainMemberSerializer(StrictSerializer):
    """A member whose steps run one after another; its last step is the member."""

    chain = ScheduleTaskSerializer(
        many=True, allow_empty=False,
        help_text=f"At most {groups.MAX_CHAIN_STEPS} steps, without idempotency keys; only the "
                  "first may have `after`.")


@extend_schema_field(PolymorphicProxySerializer(
    component_name="GroupMember", serializers=[ScheduleTaskSerializer, ChainMemberSerializer],
    resource_type_field_name=None))
class GroupMemberField(serializers.JSONField):
    """A member: a task, or `{"chain": [task, ...]}` (checked by tasks_core.groups)."""


class ScheduleGroupSerializer(StrictSerializer):
    """A group to schedule, all or none: its members and callbacks as tasks are scheduled.
    Errors are keyed "tasks[i].field" ("tasks[i].chain[j].field" in a chain), "then.field",
    "on_failure.field" and "idempotency_key"."""

    tasks = serializers.ListField(
        child=GroupMemberField(), allow_empty=False,
        help_text=f"At most {groups.MAX_MEMBERS} tasks, chains' steps counted. A member whose "
                  "idempotency_key names an existing task of its lambda is that task.")
    then = ScheduleTaskSerializer(required=False, allow_null=True,
                                  help_text="Runs once, after every member succeeded.")
    on_failure = ScheduleTaskSerializer(required=False, allow_null=True,
                                        help_text="Runs once, when a member ended "
                                                  "fatal_failure, dead, cancelled or dropped.")
    idempotency_key = serializers.CharField(
        required=False, allow_null=True,
        help_text="A second POST with this key (in the team) answers 200 with the first group.")

    def to_internal_value(self, data: Any) -> groups.GroupRequest:
        if not (isinstance(data, Mapping) and isinstance(data.get("tasks"), list)
                and data["tasks"] and set(data) <= set(self.fields)):
            return super().to_internal_value(data)  # the usual errors of the shape
        return groups.GroupRequest(data["tasks"], then=data.get("then"),
                                   on_failure=data.get("on_failure"),
                                   idempotency_key=data.get("idempotency_key"))


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
                  "on_failure", "idempotency_key", "created_at", "finished_at"]

    @extend_schema_field(serializers.ListField(child=serializers.IntegerField()))
    def get_tasks(self, group: TaskGroup) -> list[int]:
        """The members' ids in order (a chain member's last step), the first `MEMBERS_SHOWN`."""
        return list(groups.members_in_order(group).values_list("pk", flat=True)[:MEMBERS_SHOWN])

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

    @extend_schema(request=ScheduleGroupSerializer,
                   responses={201: GroupSerializer, 200: GroupSerializer})
    def create(self, request: Request) -> Response:
        """201 with the group made; 200 with the earlier group its idempotency key names."""
        scope = Scope.of(request.user)
        asked = validated(ScheduleGroupSerializer, request.data, {"teams": scope.team_ids})
        schedule_rate.take(request, groups.tasks_in(asked))
        scope.check_may_follow(groups.parents_named(asked))
        group, created = groups.place(asked, teams=scope.team_ids)
        with shards.on(group.pk):
            return Response(GroupSerializer(group).data,
                            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)

    @extend_schema(responses={200: GroupSerializer})
    def retrieve(self, request: Request, pk: str) -> Response:
        with shards.on(int(pk)):  # a group lives on its members' shard, its id says which
            group = Scope.of(request.user).filter(TaskGroup.objects.all(), "team") \
                .filter(pk=int(pk)).first()
            if group is None:
                raise TaskNotFound(f"no group {pk}")
            return Response(GroupSerializer(group).data)

