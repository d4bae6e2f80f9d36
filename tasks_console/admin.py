"""The console: admin pages for every model of the task store (see gate_admin, task_admin),
registered in the project's own admin site."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin
from django.db.models import ForeignKey, Model, QuerySet
from django.forms import ModelChoiceField
from django.http import HttpRequest
from django.utils import timezone

from tasks_console import (  # noqa: F401
    dashboard_admin,
    display,
    filters,
    gate_admin,
    group_admin,
    task_admin,
    token_admin,
    worker_tasks,
)
from tasks_console.base import ConsoleAdmin
from tasks_console.forms import PeriodicTaskForm
from tasks_console.paginator import EstimatedCountPaginator
from tasks_core import access, liveness, operations
from tasks_core.access import Scope
from tasks_core.models import PeriodicTask, TaskAttempt, TaskDependency, Team, Worker


@admin.register(Team)
class TeamAdmin(ConsoleAdmin):
    """Holders of Django's team permissions (superusers) manage teams and their members;
    other staff see their own teams."""

    team_path = "pk"
    list_display = ("name", "member_count", "lambda_count")
    search_fields = ("name",)
    filter_horizontal = ("members",)

    @admin.display(description="members")
    def member_count(self, team: Team) -> int:
        return team.members.count()

    @admin.display(description="lambdas")
    def lambda_count(self, team: Team) -> int:
        return team.lambdas.count()

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return request.user.has_perm("tasks_core.add_team")

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return request.user.has_perm("tasks_core.change_team")


@admin.register(PeriodicTask)
class PeriodicTaskAdmin(ConsoleAdmin):
    """Schedules; a team member may add and edit those of the team's lambdas."""

    team_path = "lambda_ref__team"
    list_display = ("name", "lambda_ref", "cron", "interval_s", "collection", "priority",
                    "enabled", "in_code", "next_run_at", "last_run_at")
    list_filter = (filters.LambdaFilter, "enabled", "in_code")
    search_fields = ("name",)
    list_select_related = ("lambda_ref",)
    readonly_fields = ("in_code", "next_run_at", "last_run_at", "last_error")
    form = PeriodicTaskForm

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return access.may_use_console(request.user)

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return access.may_use_console(request.user) and not (
            isinstance(obj, PeriodicTask) and obj.in_code)

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return self.has_change_permission(request, obj)

    def formfield_for_foreignkey(self, db_field: ForeignKey, request: HttpRequest,
                                 **kwargs: Any) -> ModelChoiceField | None:
        if db_field.name == "lambda_ref":
            kwargs["queryset"] = Scope.of(request.user).lambdas()
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def save_model(self, request: HttpRequest, obj: PeriodicTask, form: Any,
                   change: bool) -> None:
        """Saved as the API saves it: a new timing starts from its next occurrence."""
        row = PeriodicTask.objects.get(pk=obj.pk) if change else obj
        changes = {name: getattr(obj, name) for name in form.changed_data}
        saved = operations.save_periodic(Scope.of(request.user), row, changes)
        obj.pk, obj.next_run_at = saved.pk, saved.next_run_at


@admin.register(TaskAttempt)
class TaskAttemptAdmin(ConsoleAdmin):
    team_path = "task__lambda_ref__team"
    paginator = EstimatedCountPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    sortable_by = ("id",)
    ordering = ("-id",)
    list_display = ("id", "task", "number", "outcome", "worker", "started_at", "ended_at",
                    "error_summary")
    list_filter = ("outcome",)
    search_fields = ("=task__id",)
    raw_id_fields = ("task",)

    @admin.display(description="error")
    def error_summary(self, attempt: TaskAttempt) -> str:
        return display.error_line(attempt.error)


@admin.register(TaskDependency)
class TaskDependencyAdmin(ConsoleAdmin):
    team_path = "child__lambda_ref__team"
    paginator = EstimatedCountPaginator
    show_full_result_count = False
    list_display = ("id", "parent", "child")
    search_fields = ("=parent__id", "=child__id")
    raw_id_fields = ("parent", "child")


@admin.register(Worker)
class WorkerAdmin(ConsoleAdmin):
    """Workers that serve one of the user's lambdas, showing only the user's lambda names."""

    list_display = ("worker_id", "host", "pid", "threads", "started_at", "last_seen", "alive")
    search_fields = ("worker_id", "host")
    exclude = ("lambdas",)  # shown through lambda_list, which leaves out other teams' names

    def get_queryset(self, request: HttpRequest) -> QuerySet[Worker]:
        workers = super().get_queryset(request)
        if Scope.of(request.user).every_team:
            return workers
        # The worker table is small (one row per process); JSON lists are compared in Python
        # because SQLite has no JSON containment lookup.
        keep = [worker.pk for worker in Scope.of(request.user).workers(workers)]
        return workers.filter(pk__in=keep)

    def _lambda_list(self, request: HttpRequest) -> Callable[[Worker], str]:
        names = Scope.of(request.user).lambda_names()

        @admin.display(description="lambdas")
        def lambda_list(worker: Worker) -> str:
            return display.worker_lambdas(worker, names)

        return lambda_list

    def get_list_display(self, request: HttpRequest) -> list[Any]:
        columns: list[Any] = list(self.list_display)
        columns.insert(columns.index("threads") + 1, self._lambda_list(request))
        return columns

    def get_readonly_fields(self, request: HttpRequest, obj: Model | None = None) -> list[Any]:
        return [*super().get_readonly_fields(request, obj), self._lambda_list(request),
                self._running_tasks(request)]

    def _running_tasks(self, request: HttpRequest) -> Callable[[Worker], str]:
        lambdas = Scope.of(request.user).lambdas()

        @admin.display(description="running tasks")
        def running_tasks(worker: Worker) -> str:
            return worker_tasks.running_table(worker, lambdas, now=timezone.now())

        return running_tasks

    @admin.display(description="alive", boolean=True)
    def alive(self, worker: Worker) -> bool:
        return liveness.is_live(worker, now=timezone.now())
