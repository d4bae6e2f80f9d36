"""Forms of the console: its confirmation pages, and the periodic-task form."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import forms
from django.utils import timezone

from tasks_api.models import ApiToken
from tasks_core import limits, periodic
from tasks_core.exceptions import InvalidTask, LimitReached
from tasks_core.models import PeriodicTask


def within_time_bounds(value: datetime | None) -> None:
    """A form field's validator: a time within tasks_core.limits.EARLIEST_TIME and LATEST_TIME
    (the bounds the API and the Python calls keep)."""
    if value is None:
        return
    try:
        limits.in_utc(value)
    except ValueError as exc:
        raise forms.ValidationError(str(exc)) from None


class GateForm(forms.Form):
    """The optional time at which a closed gate reopens by itself."""

    until = forms.DateTimeField(
        required=False,
        label="Until (UTC, optional)",
        help_text="Leave empty to keep the gate closed until someone resumes it.",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
        validators=[within_time_bounds],
    )

    def clean_until(self) -> datetime | None:
        until = self.cleaned_data["until"]
        if until is not None and until <= timezone.now():
            raise forms.ValidationError("Pick a time in the future.")
        return until


class PeriodicTaskForm(forms.ModelForm):
    """A schedule as the console edits it, refused for exactly what the API refuses: the checks
    are `periodic.check_row`'s (timing, time zone, and what each occurrence would be refused
    for when scheduled: payload text, depth and size, collection, priority)."""

    #: check_row's field names that the form calls differently.
    RENAMED = {"lambda": "lambda_ref"}

    class Meta:
        model = PeriodicTask
        fields = ["name", "lambda_ref", "cron", "interval_s", "timezone", "payload", "collection",
                  "priority", "catch_up", "enabled"]

    def _post_clean(self) -> None:
        # _post_clean is Django's private hook after clean(), missing from the stubs.
        super()._post_clean()  # type: ignore[misc]  # the instance now holds the cleaned values
        if "lambda_ref" not in self.cleaned_data:
            return  # nothing to check the occurrences against; the form says why
        try:
            if self.instance.pk is None:
                periodic.check_team_room(self.instance.lambda_ref.team_id)
        except LimitReached as exc:
            self.add_error(None, str(exc))
        try:
            periodic.check_row(self.instance, now=timezone.now())
        except InvalidTask as exc:
            for name, messages in exc.errors.items():
                field = self.RENAMED.get(name, name)
                if field not in self.fields:
                    self.add_error(None, [f"{name}: {message}" for message in messages])
                elif field not in self.errors:  # the form's own error on it says it first
                    self.add_error(field, messages)


class ApiTokenForm(forms.ModelForm):
    """A new token as the console makes it, refused for exactly what `POST /api/v1/tokens/`
    refuses: its name, scope and expiry go through the API's own serializer
    (CreateTokenSerializer); the team is the admin's scoped choice."""

    #: The serializer's fields that this form has too.
    CHECKED = ("name", "scope", "expires_at")

    class Meta:
        model = ApiToken
        fields = ["name", "team", "scope", "expires_at"]

    def clean(self) -> dict[str, Any]:
        # Imported here: REST framework's serializers cost every process that loads the admin
        # (workers and consumers too) ~140 ms and several MB, and only this form needs them.
        from tasks_api.token_serializers import CreateTokenSerializer

        cleaned = super().clean() or {}
        values = {name: cleaned[name] for name in self.CHECKED if cleaned.get(name) is not None}
        check = CreateTokenSerializer(data=values)
        if not check.is_valid():
            for name, messages in check.errors.items():
                field = name if name in self.fields else None
                if field is None or field not in self.errors:
                    self.add_error(field, [str(message) for message in messages])
        return cleaned
