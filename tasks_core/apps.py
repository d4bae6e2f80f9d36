from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import post_migrate
from django.utils.module_loading import autodiscover_modules

from tasks_core import conf


def _sync_lambdas(sender: AppConfig, **kwargs: object) -> None:
    from tasks_core import periodic, registry

    registry.sync_to_store()
    periodic.sync_code_schedules()


class TasksCoreConfig(AppConfig):
    name = "tasks_core"
    verbose_name = "ATF tasks"
    default_auto_field = "django.db.models.BigAutoField"

    def __init__(self, app_name: str, app_module: object) -> None:
        super().__init__(app_name, app_module)
        # Before any app's models or lambdas are imported, some of which read settings.
        conf.install_defaults()

    def ready(self) -> None:
        from tasks_core import checks  # noqa: F401  (registers the system checks)

        # Lambdas live in `lambdas.py` modules of installed apps, found like `admin.py`.
        autodiscover_modules("lambdas")
        post_migrate.connect(_sync_lambdas, sender=self)
