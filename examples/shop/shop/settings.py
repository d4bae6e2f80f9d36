"""Settings of the example shop: a Django project of its own that installed django-atf.

ATF needs its apps, the project's database and a Redis URL; every other ATF setting keeps its
default (docs/settings.md lists them). The environment variables below exist only so that the
test suite can point the shop at its own database and Redis.
"""

from __future__ import annotations

import os
from pathlib import Path

import django

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = os.environ.get("SHOP_SECRET_KEY", "example-shop-not-secret")
DEBUG = False
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "testserver"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",  # the templates of the API's docs page
    "drf_spectacular_sidecar",  # its Swagger UI, as static files (never from a CDN)
    # Django 6 has the tasks framework built in; on 5.2 the django-tasks backport provides it.
    *(["django_tasks"] if django.VERSION < (6, 0) else []),
    # ATF: the task store, its REST API, its console (in this project's admin) and its workers.
    "tasks_core",
    "tasks_api",
    "tasks_console",
    "workers",
    "orders",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "shop.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

if os.environ.get("SHOP_DB_NAME"):
    DATABASES = {"default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ["SHOP_DB_NAME"],
        "USER": os.environ.get("SHOP_DB_USER", "postgres"),
        "HOST": os.environ.get("SHOP_DB_HOST", "127.0.0.1"),
        "PORT": os.environ.get("SHOP_DB_PORT", "5432"),
    }}
else:
    DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3",
                             "NAME": BASE_DIR / "shop.sqlite3"}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# ATF: the one setting it cannot default.
ATF_REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
ATF_QUEUE_PREFIX = os.environ.get("SHOP_QUEUE_PREFIX", "shop")

# Django's tasks framework: `@task` functions (orders/tasks.py) run as ATF tasks.
TASKS = {"default": {"BACKEND": "tasks_core.backend.ATFBackend", "QUEUES": []}}

# The shop's own API policy is open; ATF's API keeps its own (token or session, team-scoped).
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.AllowAny"],
}

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_TZ = True
STATIC_URL = "static/"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "INFO"},
}
