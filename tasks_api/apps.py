from __future__ import annotations

from django.apps import AppConfig


class TasksApiConfig(AppConfig):
    name = "tasks_api"
    verbose_name = "ATF REST API"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Importing checks registers the system checks.
        from tasks_api import checks, token_cache  # noqa: F401

        token_cache.connect_signals()
