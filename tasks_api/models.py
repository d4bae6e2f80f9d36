"""API tokens: only a hash of each token is stored, with a short prefix to tell them apart."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db import models
from django.utils import timezone

from tasks_core.models import Team


class Scope(models.TextChoices):
    FULL = "full", "full"  #: every endpoint of the API, with its user's rights
    WORKER = "worker", "worker"  #: only the worker endpoints, for its team's lambdas


class ApiToken(models.Model):
    """One API token of a team member. The token itself is shown once, at creation."""

    name = models.CharField(max_length=100)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="api_tokens",
                             null=True, blank=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                             related_name="atf_api_tokens")
    scope = models.CharField(max_length=16, choices=Scope.choices, default=Scope.FULL)
    #: The first characters of the token, to recognise it in lists and logs.
    prefix = models.CharField(max_length=16)
    #: SHA-256 of the whole token, in hex; the token is looked up by it.
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    def is_active(self, now: datetime) -> bool:
        """Neither revoked nor expired at `now`."""
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > now)
