"""Tasks and the dead-letter queue: find a task, see why it failed, cancel, run now, requeue."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin import DateFieldListFilter
from django.db.models import Count, Max, Q, QuerySet
from django.db.models.fields.json import KT
from django.db.models.functions import Substr
from django.forms.models import BaseInlineFormSet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from tasks_console import display, filters
from tasks_console.base import ConsoleAdmin, confirmation, report
from tasks_console.models import DeadLetter
from tasks_console.paginator import EstimatedCountPaginator
from tasks_core import attempt_history, limits, operations, shards, states
from tasks_core.access import Scope
from tasks_core.models import TaskAttempt, TaskDependency, TaskEntity, TaskStep

#: Buttons on a task's page: (action name, label).
TASK_BUTTONS = [("cancel_tasks", "Cancel"), ("run_now", "Run now"), ("requeue_tasks", "Requeue")]
#: Statuses whose last error is searched (a success may keep the error of an earlier retry,
#: but people search for what is failing).
ERROR_STATUSES = [states.TaskStatus.RETRYING, states.TaskStatus.FATAL_FAILURE,
                  states.TaskStatus.DEAD, states.TaskStatus.CANCELLED, states.TaskStatus.DROPPED]
#: The dead-letter summary groups this many of the latest dead letters (a bound on its cost).
GROUP_SAMPLE = 1000
#: Characters of an error message that make a dead-letter group.
MESSAGE_PREFIX = 120


class LatestAttempts(BaseInlineFormSet):
    """A task's latest limits.SHOWN_ATTEMPTS attempts, oldest first, and where all of them
    are (the console's attempt list, searched by the task's id) when it has more."""

    def get_queryset(self) -> Any:
        if not hasattr(self, "_latest"):
            rows = list(super().get_queryset().order_by("-number")[:limits.SHOWN_ATTEMPTS])
            newest = attempt_history.newest_first(self.instance, rows)[:limits.SHOWN_ATTEMPTS]
            self._latest = newest[::-1]
        return self._latest

    def count(self) -> int:
        """How many attempts the task has had in all."""
        shown = len(self.get_queryset())
        return shown if shown < limits.SHOWN_ATTEMPTS else attempt_history.count(self.instance)

    def all_attempts_url(self) -> str:
        return reverse("admin:tasks_core_taskattempt_changelist") + f"?q={self.instance.pk}"


class AttemptTimeline(admin.TabularInline):
    """The attempt history on a task's page, oldest first: its latest attempts."""

    model = TaskAttempt
    formset = LatestAttempts
    template = "tasks_console/attempt_timeline.html"
    extra = 0
    can_delete = False
    fields = ("number", "outcome", "worker", "started_at", "ended_at", "error")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return True


#: Steps a task's page lists.
MAX_SHOWN_STEPS = 200


class BigTaskListAdmin(ConsoleAdmin):
    """A list over the task table: no full COUNT, sorting only by id, filters on small tables."""

    team_path = "lambda_ref__team"
    paginator = EstimatedCountPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER  # facet counts would scan the whole table
    list_per_page = 50
    ordering = ("-id",)
    sortable_by = ("id",)
    list_select_related = ("lambda_ref", "progress")
    search_fields = ("idempotency_key",)
    search_help_text = ("Task id, exact idempotency key, or words of the last error of a "
                        "failing task.")

    def search(self, request: HttpRequest, queryset: QuerySet,
               search_term: str) -> tuple[QuerySet, bool]:
        """Each alternative is one an index can answer: the id, the (lambda, key) unique index,
        and error text only among tasks whose status keeps an error (the status index)."""
        term = search_term.strip()
        if not term:
            return queryset, False
        lambda_ids = list(Scope.of(request.user).lambdas().values_list("pk", flat=True))
        match = Q(lambda_ref_id__in=lambda_ids, idempotency_key=term)
        if term.lstrip("#").isdigit():  # a number is an id (or a key), not error text
            match |= Q(pk=int(term.lstrip("#")))
        else:
            match |= Q(status__in=ERROR_STATUSES) & (
                Q(last_error__type=term) | Q(last_error__message__icontains=term))
        return queryset.filter(match), False

    @admin.display(description="shard")
    def shard(self, task: TaskEntity) -> str:
        return shards.alias_of(task.pk)

    def get_list_display(self, request: HttpRequest) -> Any:
        columns = super().get_list_display(request)
        return [*columns[:1], "shard", *columns[1:]] if shards.sharded() else columns

    def get_list_filter(self, request: HttpRequest) -> Any:
        return [filters.ShardFilter, *super().get_list_filter(request)]

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        fieldsets = super().get_fieldsets(request, obj)
        if not shards.sharded():
            return fieldsets
        (name, first), *rest = fieldsets
        return [(name, {**first, "fields": [("id", "shard", "status_badge"),
                                            *first["fields"][1:]]}), *rest]

    @admin.display(description="status", ordering="status")
    def status_badge(self, task: TaskEntity) -> SafeString:
        return display.status_badge(task.status)

    @admin.display(description="lambda", ordering="lambda_ref__name")
    def lambda_name(self, task: TaskEntity) -> SafeString:
        url = reverse("admin:tasks_core_lambda_change", args=[task.lambda_ref_id])
        return format_html('<a href="{}">{}</a>', url, task.lambda_ref.name)

    @admin.display(description="attempts")
    def attempts_display(self, task: TaskEntity) -> str:
        return f"{task.attempts}/{task.max_attempts}"

    @admin.display(description="last error")
    def error_summary(self, task: TaskEntity) -> str:
        return display.error_line(task.last_error)

    @admin.display(description="payload")
    def payload_pretty(self, task: TaskEntity) -> SafeString:
        return display.pretty_json(task.payload)

    @admin.display(description="result")
    def result_pretty(self, task: TaskEntity) -> SafeString:
        return display.pretty_json(task.result)

    @admin.display(description="last error")
    def error_message(self, task: TaskEntity) -> str:
        return display.error_line(task.last_error, limit=2000) or "—"

    @admin.display(description="traceback")
    def traceback(self, task: TaskEntity) -> SafeString:
        return display.traceback_block(task.last_error)

    @admin.display(description="waits for (parents)")
    def parent_links(self, task: TaskEntity) -> SafeString:
        ids = TaskDependency.objects.filter(child_id=task.pk).values_list("parent_id")
        return display.task_links(list(TaskEntity.objects.filter(pk__in=ids)
                                       .values_list("pk", "status")))

    @admin.display(description="runs after it (children)")
    def child_links(self, task: TaskEntity) -> SafeString:
        ids = TaskDependency.objects.filter(parent_id=task.pk).values_list("child_id")
        return display.task_links(list(TaskEntity.objects.filter(pk__in=ids)
                                       .values_list("pk", "status")))

    @admin.display(description="progress")
    def progress_display(self, task: TaskEntity) -> SafeString:
        return display.progress_bar(getattr(task, "progress", None))

    @admin.display(description="steps (recorded results)")
    def step_list(self, task: TaskEntity) -> SafeString:
        rows = list(TaskStep.objects.filter(task_id=task.pk).order_by("pk").values_list(
            "name", "attempt", "recorded_at", "size")[:MAX_SHOWN_STEPS])
        if not rows:
            return format_html("<em>{}</em>", "none")
        return format_html_join(mark_safe("<br>"), "{} — attempt {}, {}, {} bytes", rows)

    @admin.display(description="group")
    def group_link(self, task: TaskEntity) -> SafeString:
        if task.group_id is None:
            return format_html("<em>{}</em>", "none")
        url = reverse("admin:tasks_core_taskgroup_change", args=[task.group_id])
        return format_html('<a href="{}">group #{}</a>', url, task.group_id)

    fieldsets = [
        (None, {"fields": [("id", "status_badge"), ("lambda_name", "collection", "priority"),
                           ("attempts_display", "worker", "lease"), "idempotency_key"]}),
        ("Times", {"fields": [("run_at", "created_at"), ("enqueued_at", "claimed_at"),
                              ("started_at", "heartbeat_at"), "finished_at"]}),
        ("Payload and result", {"fields": ["payload_pretty", "result_pretty"]}),
        ("Last error", {"fields": ["error_message", "traceback"]}),
        ("Chain and group", {"fields": ["parent_links", "child_links", "group_link"]}),
        ("Progress and steps", {"fields": ["progress_display", "step_list"]}),
    ]
    inlines = [AttemptTimeline]

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict | None = None) -> HttpResponse:
        extra = {**(extra_context or {}), "object_actions": self.object_buttons}
        if not (shards.sharded() and object_id.isdigit()):
            return super().change_view(request, object_id, form_url, extra)
        with shards.on(int(object_id)):  # the task's shard, for the page's every read
            response = super().change_view(request, object_id, form_url, extra)
            if isinstance(response, TemplateResponse):
                response.render()
            return response

    object_buttons: list[tuple[str, str]] = []
    change_form_template = "tasks_console/change_form_actions.html"


@admin.register(TaskEntity)
class TaskAdmin(BigTaskListAdmin):
    list_display = ("id", "lambda_name", "collection", "priority", "status_badge",
                    "attempts_display", "worker", "progress_display", "run_at", "created_at",
                    "finished_at", "error_summary")
    list_filter = (filters.LambdaFilter, filters.CollectionFilter, "status",
                   filters.PriorityFilter, filters.TeamFilter, filters.WorkerFilter,
                   ("created_at", DateFieldListFilter))
    actions = ["cancel_tasks", "run_now", "requeue_tasks"]
    object_buttons = TASK_BUTTONS

    @admin.action(description="Cancel selected tasks (running ones: their worker stops them)")
    def cancel_tasks(self, request: HttpRequest, queryset: QuerySet) -> None:
        done = operations.cancel_many(Scope.of(request.user), queryset)
        report(request, f"Cancelled {done.changed} task(s)." if done.changed else "",
               list(done.problems))

    @admin.action(description="Run selected tasks now (delayed or retrying ones)")
    def run_now(self, request: HttpRequest, queryset: QuerySet) -> None:
        done = operations.run_now_many(Scope.of(request.user), queryset)
        skipped = [f"{done.skipped} task(s) were neither delayed (new, due later) nor retrying "
                   "and were left as they are."] if done.skipped else []
        report(request, f"{done.changed} task(s) are due now." if done.changed else "", skipped)

    @admin.action(description="Requeue selected tasks that ended without success")
    def requeue_tasks(self, request: HttpRequest, queryset: QuerySet) -> None:
        requeue(request, queryset, statuses=states.REQUEUEABLE)


def requeue(request: HttpRequest, queryset: QuerySet, *,
            statuses: frozenset[states.TaskStatus]) -> None:
    done = operations.requeue_many(Scope.of(request.user), queryset, statuses=statuses)
    allowed = ", ".join(sorted(statuses))
    skipped = [f"{done.skipped} task(s) were not in a requeueable status ({allowed})."] \
        if done.skipped else []
    report(request, f"Requeued {done.changed} task(s): they are new again." if done.changed
           else "", skipped)


@admin.register(DeadLetter)
class DeadLetterAdmin(BigTaskListAdmin):
    list_display = ("id", "lambda_name", "collection", "priority", "attempts_display",
                    "finished_at", "error_summary")
    list_filter = (filters.LambdaFilter, filters.ErrorTypeFilter, filters.ErrorMessageFilter,
                   filters.CollectionFilter, filters.TeamFilter,
                   ("finished_at", DateFieldListFilter))
    actions = ["requeue_dead", "discard_dead"]
    object_buttons = [("requeue_dead", "Requeue"), ("discard_dead", "Discard…")]

    def list_page(self, request: HttpRequest,
                  extra_context: dict | None = None) -> HttpResponse:
        dead = self.get_queryset(request)
        extra = {**(extra_context or {}), "dead_groups": self.groups(dead),
                 "group_sample": GROUP_SAMPLE if self.sampled(dead) else None}
        return super().list_page(request, extra)

    @staticmethod
    def sampled(dead: QuerySet) -> bool:
        """Whether there are more dead letters than the summary groups."""
        return dead.order_by("-id").values("pk")[GROUP_SAMPLE:GROUP_SAMPLE + 1].exists()

    @staticmethod
    def groups(dead: QuerySet) -> list[dict[str, Any]]:
        """The latest dead letters counted by lambda, error type and the start of the message."""
        # A list of ids (not a subquery) so the plan reads only these rows, by primary key.
        latest = list(dead.order_by("-id").values_list("pk", flat=True)[:GROUP_SAMPLE])
        return list(
            dead.filter(pk__in=latest).order_by()
            .values("lambda_ref_id", "lambda_ref__name")
            .annotate(error_type=KT("last_error__type"),
                      message=Substr(KT("last_error__message"), 1, MESSAGE_PREFIX))
            .values("lambda_ref_id", "lambda_ref__name", "error_type", "message")
            .annotate(count=Count("id"), latest=Max("finished_at"))
            .order_by("-count")[:25]
        )

    @admin.action(description="Requeue selected dead letters")
    def requeue_dead(self, request: HttpRequest, queryset: QuerySet) -> None:
        requeue(request, queryset, statuses=frozenset({states.TaskStatus.DEAD}))

    @admin.action(description="Discard selected dead letters for good…")
    def discard_dead(self, request: HttpRequest, queryset: QuerySet) -> TemplateResponse | None:
        if "apply" not in request.POST:
            count = queryset.count()
            return confirmation(
                request, self, action="discard_dead", title="Discard: are you sure?",
                lines=[f"{count} dead task(s) will be deleted for good, with their attempt "
                       "history. They cannot be requeued afterwards."],
                button=f"Yes, discard {count}", danger=True,
            )
        done = operations.discard_many(Scope.of(request.user), queryset)
        report(request, f"Discarded {done.changed} dead task(s).", [])
        return None
