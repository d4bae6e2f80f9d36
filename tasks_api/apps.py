from __future__ import annotations

from django.apps import AppConfig


class TasksApiConfig(AppConfig):
    name = "tasks_api"
    verbose_name = "ATF REST API"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from tasks_api import checks  # noqa: F401  (registers the system checks)
        from tasks_api import token_cache

        token_cache.connect_signals()
