"""Lambdas and collections: their gates, and the pause / resume / drop actions."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from functools import partial
from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.safestring import SafeString

from tasks_console import display, filters, gates, options
from tasks_console.base import ConsoleAdmin, confirmation, report
from tasks_console.forms import GateForm
from tasks_console.gates import GateTarget
from tasks_core import operations
from tasks_core.access import Scope
from tasks_core.gating import GateState
from tasks_core.models import Collection, Lambda

GATE_COLOURS = {"open": "#2e8540", "paused": "#d9822b", "dropped": "#b0281a"}
#: Buttons on a lambda's or collection's page: (action name, label).
GATE_BUTTONS = [("pause_gate", "Pause"), ("resume_gate", "Resume"), ("drop_gate", "Drop…")]


class GatedAdmin(ConsoleAdmin):
    """Shared by Lambda and Collection: gate columns and the three gate actions."""

    actions = ["pause_gate", "resume_gate", "drop_gate"]
    related_for_gate: tuple[str, ...] = ()
    change_form_template = "tasks_console/change_form_actions.html"

    @admin.display(description="gate")
    def gate_display(self, row: Lambda | Collection) -> SafeString:
        now = timezone.now()
        colour = GATE_COLOURS[row.gate] if gates.is_closed(row, now) else GATE_COLOURS["open"]
        return display.badge(gates.describe(row, now), colour)

    @admin.display(description="held back")
    def held_back(self, row: Lambda | Collection) -> int | str:
        """Due tasks a closed gate keeps from the queues (an open gate holds none)."""
        now = timezone.now()
        if not gates.is_closed(row, now):
            return "—"
        return gates.due_count(gates.GateTarget.of(row), now)

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict[str, Any] | None = None) -> HttpResponse:
        extra = {**(extra_context or {}), "object_actions": GATE_BUTTONS}
        return super().change_view(request, object_id, form_url, extra)

    def _targets(self, request: HttpRequest, queryset: QuerySet) -> list[gates.GateTarget]:
        if self.related_for_gate:
            queryset = queryset.select_related(*self.related_for_gate)
        rows = list(queryset)
        Scope.of(request.user).check_lambda_ids({gates.GateTarget.of(r).lambda_id for r in rows})
        return [gates.GateTarget.of(row) for row in rows]

    def _apply(self, request: HttpRequest, targets: list[gates.GateTarget], state: GateState,
               until: datetime | None = None) -> None:
        for target in targets:
            operations.gate(Scope.of(request.user), target.lambda_name, state,
                            collection=target.collection, until=until)
        names = ", ".join(str(t) for t in targets)
        suffix = f" until {until:%Y-%m-%d %H:%M} UTC" if until else ""
        report(request, f"Gate {state}{suffix}: {names}.", [])

    def _close(self, request: HttpRequest, queryset: QuerySet, state: GateState, *,
               action: str, title: str, button: str, lines: Callable[[GateTarget], str],
               danger: bool = False) -> TemplateResponse | None:
        """Ask for the optional "until" (and a confirmation); on `apply`, close the gates."""
        targets = self._targets(request, queryset)
        form = GateForm(request.POST if "apply" in request.POST else None)
        if form.is_bound and form.is_valid():
            self._apply(request, targets, state, form.cleaned_data["until"])
            return None
        return confirmation(request, self, action=action, title=title, button=button,
                            lines=[lines(target) for target in targets], form=form,
                            danger=danger)

    @admin.action(description="Pause selected (tasks wait; nothing is lost)")
    def pause_gate(self, request: HttpRequest, queryset: QuerySet) -> TemplateResponse | None:
        now = timezone.now()
        return self._close(
            request, queryset, GateState.PAUSED, action="pause_gate", title="Pause gates",
            button="Pause",
            lines=lambda t: f"{t}: {gates.due_count(t, now)} tasks are due now; they and every "
                            "task that comes due will wait until the gate opens.",
        )

    @admin.action(description="Resume selected (open the gate)")
    def resume_gate(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._apply(request, self._targets(request, queryset), GateState.OPEN)

    @admin.action(description="Drop selected… (tasks are marked dropped)")
    def drop_gate(self, request: HttpRequest, queryset: QuerySet) -> TemplateResponse | None:
        now = timezone.now()
        return self._close(
            request, queryset, GateState.DROPPED, action="drop_gate",
            title="Drop: are you sure?", button="Yes, drop", danger=True,
            lines=lambda t: f"{t}: {gates.due_count(t, now)} tasks are due now and will be "
                            f"dropped at once; {gates.coming_count(t, None)} unfinished tasks "
                            "in all will be dropped as they come due while the gate stays "
                            "dropped. Dropped tasks do not run; a requeue from the task list "
                            "brings them back.",
        )


@admin.register(Lambda)
class LambdaAdmin(GatedAdmin):
    team_path = "team"
    list_display = ("name", "team", "gate_display", "held_back", "options_summary", "in_code")
    list_filter = ("gate", filters.team_filter("team"), "in_code")
    search_fields = ("name",)
    list_select_related = ("team",)
    readonly_fields = ("gate_display", "held_back", "options_table")
    fields = ("name", "team", "gate_display", "held_back", "gate_until", "options_table",
              "in_code", "created_at", "updated_at")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Lambda]:
        return super().get_queryset(request).prefetch_related("overrides")

    def get_urls(self) -> list[URLPattern]:
        page = self.admin_site.admin_view(partial(options.view, self))
        return [path("<path:object_id>/options/", page, name="tasks_core_lambda_options"),
                *super().get_urls()]

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict[str, Any] | None = None) -> HttpResponse:
        links = [(reverse("admin:tasks_core_lambda_options", args=[object_id]), "Options…")]
        extra = {**(extra_context or {}), "object_links": links}
        return super().change_view(request, object_id, form_url, extra)

    @admin.display(description="options (operator values in bold)")
    def options_summary(self, row: Lambda) -> SafeString:
        return options.summary(row)

    @admin.display(description="options")
    def options_table(self, row: Lambda) -> SafeString:
        return options.table(row)


@admin.register(Collection)
class CollectionAdmin(GatedAdmin):
    team_path = "lambda_ref__team"
    related_for_gate = ("lambda_ref",)
    list_display = ("name", "lambda_ref", "gate_display", "held_back")
    list_filter = ("gate", filters.team_filter("lambda_ref__team"))
    search_fields = ("name", "lambda_ref__name")
    list_select_related = ("lambda_ref",)
    fields = ("lambda_ref", "name", "gate_display", "held_back", "gate_until")
    readonly_fields = ("gate_display", "held_back")
