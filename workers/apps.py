from __future__ import annotations

from django.apps import AppConfig


class WorkersConfig(AppConfig):
    name = "workers"
    verbose_name = "ATF workers"

    def ready(self) -> None:
        from workers import checks  # noqa: F401  (registers the heartbeat system check)
