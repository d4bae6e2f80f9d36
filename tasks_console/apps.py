from __future__ import annotations

from django.apps import AppConfig


class TasksConsoleConfig(AppConfig):
    name = "tasks_console"
    verbose_name = "ATF console"
    default_auto_field = "django.db.models.BigAutoField"
