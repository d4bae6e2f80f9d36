"""What every console admin shares: team scoping, read-only pages, and confirmation pages."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.views.main import ERROR_FLAG
from django.core.exceptions import ValidationError
from django.db.models import Model, QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from tasks_console import statement_timeout
from tasks_core import access
from tasks_core.access import Scope
from tasks_core.limits import bad_text

#: Per-task messages shown after an action; the rest are summed up in one line.
MAX_MESSAGES = 20
#: The lookups of Django's own list filters on a field (choices, booleans, dates, relations,
#: empty values): `<field>__<lookup>`.
FIELD_FILTER_LOOKUPS = ("exact", "isnull", "gte", "lt", "isempty", "id__exact")


class ConsoleAdmin(admin.ModelAdmin):
    """Read-only admin, visible to console users, limited to the rows of the user's teams."""

    #: The path from this model to its Team (None: the model is not owned by a team).
    team_path: str | None = None

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        queryset = super().get_queryset(request)
        if self.team_path is None:
            return queryset
        return Scope.of(request.user).filter(queryset, self.team_path)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return access.may_use_console(request.user)

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest | None = None,
                       ) -> bool:
        """Only the filters the list offers (`list_filter`, `date_hierarchy`): the admin would
        let any lookup on a field of the model through (`?payload__icontains=`), a scan of the
        table that no index answers. Any other is refused (Django's 400 page)."""
        return lookup in self.offered_lookups(request)

    def offered_lookups(self, request: HttpRequest | None) -> set[str]:
        """The query parameters of the list's own filters."""
        offered = set()
        items = self.get_list_filter(request) if request is not None else self.list_filter
        for item in items:
            if isinstance(item, type) and issubclass(item, admin.SimpleListFilter):
                offered.add(str(item.parameter_name))
            else:
                path = item[0] if isinstance(item, (list, tuple)) else item
                offered.update(f"{path}__{lookup}" for lookup in FIELD_FILTER_LOOKUPS)
        if self.date_hierarchy:
            offered.update(f"{self.date_hierarchy}__{part}" for part in ("year", "month", "day"))
        return offered

    def changelist_view(self, request: HttpRequest,
                        extra_context: dict[str, Any] | None = None) -> HttpResponse:
        """A list page, its queries under the console's statement timeout (a page that runs
        past it answers 503 with a message); actions (POSTs) are not limited."""
        if request.method not in ("GET", "HEAD"):
            return self.list_page(request, extra_context)
        try:
            with statement_timeout.limited():
                response = self.list_page(request, extra_context)
                if isinstance(response, TemplateResponse):
                    response.render()  # its rows are read here, within the limit
        except statement_timeout.TimedOut as exc:
            return TemplateResponse(request, "tasks_console/timed_out.html", {
                **self.admin_site.each_context(request), "title": "The list took too long",
                "opts": self.model._meta, "message": str(exc)}, status=503)
        return response

    def list_page(self, request: HttpRequest,
                  extra_context: dict[str, Any] | None = None) -> HttpResponse:
        """A list whose filters hold text no row can (NUL, lone surrogates) drops those
        filters; one whose values do not parse is shown unfiltered. Both say so."""
        if dropped := sorted({key for key, values in request.GET.lists()
                              if bad_text(key) or any(bad_text(v) for v in values)}):
            query = request.GET.copy()
            for key in dropped:
                del query[key]
            # The stubs type request.GET as an immutable QueryDict; Django accepts any.
            request.GET = query  # type: ignore[assignment]
            names = ", ".join(repr(key) for key in dropped if not bad_text(key)) or "some"
            messages.warning(request, f"Filter {names} not applied: its value is not valid "
                                      "(NUL characters or lone surrogates).")
        elif ERROR_FLAG in request.GET:  # the admin's redirect after a value that did not parse
            messages.warning(request, "A filter value was not valid; the list is not filtered.")
        return super().changelist_view(request, extra_context)

    def get_search_results(self, request: HttpRequest, queryset: QuerySet,
                           search_term: str) -> tuple[QuerySet, bool]:
        """No rows for a term no row can match (the list page and autocomplete alike)."""
        if bad_text(search_term):
            return queryset.none(), False
        try:
            return self.search(request, queryset, search_term)
        except (ValueError, ValidationError):  # e.g. letters for an id: "=task__id"
            return queryset.none(), False

    def search(self, request: HttpRequest, queryset: QuerySet,
               search_term: str) -> tuple[QuerySet, bool]:
        """The admin's search over `search_fields`; a page with its own search overrides it."""
        return super().get_search_results(request, queryset, search_term)

    def has_view_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return access.may_use_console(request.user)

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False


def report(request: HttpRequest, done: str, problems: list[str]) -> None:
    """One success line, then up to MAX_MESSAGES per-item problems as warnings."""
    if done:
        messages.success(request, done)
    for line in problems[:MAX_MESSAGES]:
        messages.warning(request, line)
    if len(problems) > MAX_MESSAGES:
        messages.warning(request, f"… and {len(problems) - MAX_MESSAGES} more not changed.")


def confirmation(request: HttpRequest, model_admin: admin.ModelAdmin, *, action: str,
                 title: str, lines: list[str], button: str, form: forms.Form | None = None,
                 danger: bool = False) -> TemplateResponse:
    """An intermediate page that posts the action back, with `apply` set, to the same list."""
    context = {
        **model_admin.admin_site.each_context(request),
        "title": title,
        "lines": lines,
        "form": form,
        "button": button,
        "danger": danger,
        "action": action,
        "selected": request.POST.getlist(ACTION_CHECKBOX_NAME),
        "select_across": request.POST.get("select_across", "0"),
        "action_checkbox_name": ACTION_CHECKBOX_NAME,
        "opts": model_admin.model._meta,
    }
    return TemplateResponse(request, "tasks_console/confirm_action.html", context)
