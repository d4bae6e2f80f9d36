"""The console's group pages: a group's status, its members' counts, its members and its
callbacks (tasks_core.groups)."""

from __future__ import annotations

from django.contrib import admin
from django.utils.html import format_html_join
from django.utils.safestring import SafeString

from tasks_console import display
from tasks_console.base import ConsoleAdmin
from tasks_core import groups
from tasks_core.models import TaskEntity, TaskGroup

#: Members a group's page links to (its counts cover them all).
MEMBERS_SHOWN = 200


def _links(task_ids: list[int | None]) -> SafeString:
    wanted = [pk for pk in task_ids if pk is not None]
    rows = dict(TaskEntity.objects.filter(pk__in=wanted).values_list("pk", "status"))
    return display.task_links([(pk, rows[pk]) for pk in wanted if pk in rows])


@admin.register(TaskGroup)
class TaskGroupAdmin(ConsoleAdmin):
    team_path = "team"
    list_display = ("id", "status_badge", "total", "succeeded", "failed", "created_at",
                    "finished_at")
    list_filter = ("status",)
    ordering = ("-id",)
    sortable_by = ("id",)
    fieldsets = [
        (None, {"fields": [("id", "status_badge", "team"), ("total", "succeeded", "failed"),
                           "member_counts", ("created_at", "finished_at"), "idempotency_key"]}),
        ("Callbacks", {"fields": ["then_link", "on_failure_link"]}),
        ("Members", {"fields": ["member_links"]}),
    ]

    @admin.display(description="status")
    def status_badge(self, group: TaskGroup) -> SafeString:
        return display.status_badge(group.status)

    @admin.display(description="members by status")
    def member_counts(self, group: TaskGroup) -> SafeString:
        return format_html_join(" ", "{} {}", ((display.status_badge(status), count) for
                                               status, count in groups.member_counts(group)
                                               .items()))

    @admin.display(description="then (after every member succeeded)")
    def then_link(self, group: TaskGroup) -> SafeString:
        return _links([group.then_id])

    @admin.display(description="on failure (after a member did not succeed)")
    def on_failure_link(self, group: TaskGroup) -> SafeString:
        return _links([group.on_failure_id])

    @admin.display(description=f"members in order (the first {MEMBERS_SHOWN}; a chain: its "
                               f"last step)")
    def member_links(self, group: TaskGroup) -> SafeString:
        return display.task_links(list(groups.members_in_order(group)
                                       .values_list("pk", "status")[:MEMBERS_SHOWN]))
