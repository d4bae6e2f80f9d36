"""Django settings for the django-tasks-db peer (its own PostgreSQL database)."""

from __future__ import annotations

import os
from urllib.parse import urlparse

_dsn = urlparse(os.environ.get("BENCH_PG_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"))

SECRET_KEY = "bench-only"
USE_TZ = True
INSTALLED_APPS = ["django_tasks", "django_tasks_db"]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _dsn.path.lstrip("/"),
        "USER": _dsn.username or "postgres",
        "HOST": _dsn.hostname or "127.0.0.1",
        "PORT": _dsn.port or 5432,
    }
}
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend", "QUEUES": ["a", "b"]}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LOGGING = {"version": 1, "disable_existing_loggers": False,
           "root": {"handlers": [], "level": "WARNING"}}
