"""A host project as a team writes one: ATF's apps added to an ordinary Django project.

It sets no LOGGING, no SPECTACULAR_SETTINGS and no ATF setting but the Redis URL, and its own
REST_FRAMEWORK defaults are ones ATF's API must not take (an open permission, basic
authentication, page-number pagination, a filter, Django REST framework's own schema class, a
throttle that refuses at once, an exception handler of its own). The tests run it as a child
process on the test run's database and Redis (tests/acceptance/test_host_project.py).
"""

from __future__ import annotations

import os

SECRET_KEY = "host-project-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["testserver", "localhost", "127.0.0.1"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "tasks_core",
    "tasks_api",
    "tasks_console",
    "workers",
    "tests.host_project",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

ROOT_URLCONF = "tests.host_project.urls"
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "APP_DIRS": True,
    "OPTIONS": {"context_processors": [
        "django.template.context_processors.request",
        "django.contrib.auth.context_processors.auth",
        "django.contrib.messages.context_processors.messages",
    ]},
}]

DATABASES = {"default": {
    "ENGINE": "django.db.backends.postgresql",
    "NAME": os.environ["HOST_DB_NAME"],
    "USER": os.environ.get("HOST_DB_USER", "postgres"),
    "HOST": os.environ.get("HOST_DB_HOST", "127.0.0.1"),
    "PORT": os.environ.get("HOST_DB_PORT", "5432"),
}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
USE_TZ = True
STATIC_URL = "static/"

ATF_REDIS_URL = os.environ["REDIS_URL"]
ATF_QUEUE_PREFIX = os.environ["HOST_QUEUE_PREFIX"]
if "HOST_ATF_LOG_LEVEL" in os.environ:
    ATF_LOG_LEVEL = os.environ["HOST_ATF_LOG_LEVEL"]

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["rest_framework.authentication.BasicAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.AllowAny"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.BrowsableAPIRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.FormParser"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 1,
    "DEFAULT_FILTER_BACKENDS": ["rest_framework.filters.SearchFilter"],
    "DEFAULT_THROTTLE_CLASSES": ["rest_framework.throttling.AnonRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {"anon": "1/day"},
    "DEFAULT_VERSIONING_CLASS": "rest_framework.versioning.QueryParameterVersioning",
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "tests.host_project.drf_defaults.PlainNegotiation",
    "DEFAULT_METADATA_CLASS": None,
    "EXCEPTION_HANDLER": "tests.host_project.drf_defaults.host_exception_handler",
}
