"""A lambda's options in the console: each value in effect and its source, and a page where a
team member sets or clears operator overrides (tasks_core.overrides)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from tasks_core import flow, operations, overrides, rates
from tasks_core.access import Scope
from tasks_core.exceptions import InvalidOverride
from tasks_core.models import Lambda

if TYPE_CHECKING:
    from django.contrib.admin import ModelAdmin


def _shown(value: float | None, name: str = "") -> str:
    """An option's value as people write it: a rate as "N/s|m|h" (tasks_core.rates)."""
    if value is not None and name in RATES:
        return rates.shown(value) or "none"
    return "none" if value is None else f"{value:g}"


#: The options whose values are rates.
RATES = frozenset(option.name for option in overrides.OPTIONS if option.is_rate)


def flow_table(row: Lambda) -> SafeString:
    """What the lambda's flow limits do now: tasks held back, starts refused by each limit, and
    the busiest keys (tasks_core.flow.summary)."""
    shown = flow.summary([row.pk])[row.pk]
    refused = ", ".join(f"{limit} {count}" for limit, count in shown["refused"].items()
                        if count) or "none"
    keys = ", ".join(f"{item['key']} ({item['running']} running, {item['held']} held)"
                     for item in shown["busiest_keys"]) or "none"
    return format_html("<table><tr><th>held now</th><td>{}</td></tr><tr><th>starts refused"
                       "</th><td>{}</td></tr><tr><th>busiest keys</th><td>{}</td></tr></table>",
                       shown["held"], refused, keys)


def summary(row: Lambda) -> SafeString:
    """One line: every option's value in effect, operator values in bold."""
    parts = []
    for name, item in overrides.resolve(row).items():
        template = "<b>{}: {}</b>" if item.source == overrides.OPERATOR else "{}: {}"
        parts.append(format_html(template, name, _shown(item.value, name)))
    return format_html_join(" · ", "{}", ((part,) for part in parts))


def table(row: Lambda) -> SafeString:
    """Every option as a table row: value in effect, source, code value, who changed it when."""
    rows = []
    for name, item in overrides.resolve(row).items():
        when = "" if item.changed_at is None else f"{item.changed_at:%Y-%m-%d %H:%M} UTC"
        rows.append((name, _shown(item.value, name), item.source, _shown(item.code_value, name),
                     item.changed_by or "", when))
    body = format_html_join("", "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
                                "<td>{}</td></tr>", rows)
    return format_html("<table><tr><th>option</th><th>value</th><th>source</th>"
                       "<th>code value</th><th>changed by</th><th>changed at</th></tr>{}</table>",
                       body)


class OverridesForm(forms.Form):
    """One text field per option: a value overrides the code's, an empty field clears it."""

    def __init__(self, row: Lambda, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.resolved = overrides.resolve(row)
        for option in overrides.OPTIONS:
            item = self.resolved[option.name]
            operator = item.source == overrides.OPERATOR
            self.fields[option.name] = forms.CharField(
                required=False, label=option.name,
                initial=_shown(item.value, option.name) if operator else "",
                help_text=f"{option.text}; code: {_shown(item.code_value, option.name)}. "
                          "Leave empty for the code's value.",
                widget=forms.TextInput(attrs={"placeholder": _shown(item.code_value,
                                                                    option.name)}),
            )

    def changes(self) -> dict[str, str | None]:
        """What differs from the overrides in place: a new value, or None to clear one."""
        found: dict[str, str | None] = {}
        for option in overrides.OPTIONS:
            typed = self.cleaned_data[option.name].strip()
            item = self.resolved[option.name]
            current = _shown(item.value, option.name) if item.source == overrides.OPERATOR \
                else ""
            if typed != current:
                found[option.name] = typed or None
        return found


def view(model_admin: ModelAdmin, request: HttpRequest, object_id: str) -> HttpResponse:
    """The options page of one lambda: GET shows the form, POST applies it."""
    row = model_admin.get_object(request, object_id)
    if row is None:  # not a lambda of the user's teams
        raise Http404("No such lambda.")
    form = OverridesForm(row, request.POST if request.method == "POST" else None)
    if form.is_bound and form.is_valid():
        changes = form.changes()
        try:
            row = operations.set_options(Scope.of(request.user), row.name, changes,
                                         by=request.user.get_username())
        except InvalidOverride as exc:
            for name, problems in exc.errors.items():
                form.add_error(name, problems)
        else:
            done = ", ".join(f"{name} {'cleared' if value is None else f'= {value}'}"
                             for name, value in changes.items()) or "nothing changed"
            messages.success(request, f"{row.name}: {done}.")
            return HttpResponseRedirect(request.path)
    context = {
        **model_admin.admin_site.each_context(request),
        "title": f"Options of {row.name}",
        "opts": model_admin.model._meta,
        "original": row,
        "options_table": table(row),
        "flow_table": flow_table(row),
        "form": form,
    }
    return TemplateResponse(request, "tasks_console/lambda_options.html", context)
