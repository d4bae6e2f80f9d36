"""The dead-letter queue as its own admin page: a proxy of the task entity (no table of its own)."""

from __future__ import annotations

from typing import ClassVar

from django.db import models

from tasks_core.models import TaskEntity
from tasks_core.states import TaskStatus


class DeadLetterManager(models.Manager["DeadLetter"]):
    def get_queryset(self) -> models.QuerySet[DeadLetter]:
        return super().get_queryset().filter(status=TaskStatus.DEAD)


class DeadLetter(TaskEntity):
    """A task whose attempts are exhausted (status `dead`), waiting for requeue or discard."""

    objects: ClassVar[DeadLetterManager] = DeadLetterManager()

    class Meta:
        proxy = True
        verbose_name = "dead letter"
        verbose_name_plural = "dead letters"


class Dashboard(models.Model):
    """The dashboard's row in the admin's list of models (*ATF console › Dashboard*); no table:
    its admin page is the dashboard (tasks_console.dashboard_admin)."""

    class Meta:
        managed = False
        default_permissions = ()
        verbose_name = "dashboard"
        verbose_name_plural = "dashboard"
