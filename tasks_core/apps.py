from __future__ import annotations

from importlib import import_module
from types import ModuleType

from django.apps import AppConfig
from django.conf import settings
from django.db.models.signals import post_migrate

from tasks_core import conf
from tasks_core.conf import atf_settings
from tasks_core.exceptions import InvalidLambdaDefinition

#: The module of the Django tasks backend, which registers the lambdas its tasks run as.
DJANGO_TASKS_BRIDGE = "tasks_core.contrib.django_tasks"
#: The backend's paths in TASKS: its module's, and the short alias (tasks_core/backend.py).
BACKEND_PATHS = (f"{DJANGO_TASKS_BRIDGE}.", "tasks_core.backend.")


def _sync_lambdas(sender: AppConfig, *, using: str, **kwargs: object) -> None:
    from tasks_core import lambda_sync, periodic, shards

    if using != shards.CONTROL:  # a shard's own database: its ids and the control rows
        shards.prepare(using)  # (nothing for another database of the project)
        return
    lambda_sync.sync_to_store()
    periodic.sync_code_schedules()


def _discover_lambdas() -> None:
    """Import the modules that register the project's lambdas."""
    from tasks_core import discovery

    # Lambdas live in `lambdas.py` modules of installed apps, found like `admin.py`.
    discovery.discover_lambdas()
    # The Django tasks backend's lambdas, wherever the project uses it as a backend: the
    # shared `django_tasks.run` and those of `@task(lambda_name=...)` functions, found in
    # the apps' `tasks` modules (Django's own checks load the backends, but workers run
    # only some of the checks). It imports `django.tasks` on Django 6, the backport on 5.2.
    if any(str(backend.get("BACKEND", "")).startswith(BACKEND_PATHS)
           for backend in getattr(settings, "TASKS", {}).values()):
        import_module(DJANGO_TASKS_BRIDGE).discover()


class TasksCoreConfig(AppConfig):
    name = "tasks_core"
    verbose_name = "ATF tasks"
    default_auto_field = "django.db.models.BigAutoField"

    def __init__(self, app_name: str, app_module: ModuleType | None) -> None:
        super().__init__(app_name, app_module)
        # Before any app's models or lambdas are imported, some of which read settings.
        conf.install_defaults()

    def ready(self) -> None:
        from tasks_core import (
            atf,
            checks,  # noqa: F401  (registers the system checks)
            directory,
            lambda_sync,
            logs,
            registry,
            tracing,
        )

        # After Django applied the project's LOGGING, which keeps any level it set.
        logs.apply_level(atf_settings.log_level)

        # The registry holds code and the directory reads the store; neither imports what
        # schedules or syncs, so both are wired here, above them.
        registry.use_scheduler(atf.schedule)
        directory.on_unknown(lambda_sync.sync_if_registered)
        try:
            _discover_lambdas()
        except InvalidLambdaDefinition as exc:
            # A mistake in a lambda's name or options: one line naming it ends whatever command
            # or server loads the apps (a traceback through Django's app loading said no more).
            raise SystemExit(f"cannot load the lambdas: {exc}") from None
        post_migrate.connect(_sync_lambdas, sender=self)
        # Once, here: where it is off, no task pays for tracing (tasks_core.tracing).
        tracing.configure()
