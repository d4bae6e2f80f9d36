"""Forms of the console's confirmation pages."""

from __future__ import annotations

from datetime import datetime

from django import forms
from django.utils import timezone


class GateForm(forms.Form):
    """The optional time at which a closed gate reopens by itself."""

    until = forms.DateTimeField(
        required=False,
        label="Until (UTC, optional)",
        help_text="Leave empty to keep the gate closed until someone resumes it.",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )

    def clean_until(self) -> datetime | None:
        until = self.cleaned_data["until"]
        if until is not None and until <= timezone.now():
            raise forms.ValidationError("Pick a time in the future.")
        return until
