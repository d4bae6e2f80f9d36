"""Settings of the standalone ATF service: the environment-variable layer.

Every setting that an operator may change is read here, once, from the environment. The ATF
settings have their defaults and meanings in `tasks_core/conf.py`; each can be set from the
environment variable of the same name (`ATF_QUEUE_BACKEND=sqs`), read as its type says
(`tasks_core.conf.from_environment`). The rest have a local default and a `#:` line here. ATF's
code reads its settings through `tasks_core.conf.atf_settings`.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

import django

from atf_project import database_url, environment
from atf_project.environment import env_bool, env_int, env_list, env_str
from tasks_api import defaults as api_defaults
from tasks_core import conf, logs

BASE_DIR = Path(__file__).resolve().parent.parent


# --- Django ---------------------------------------------------------------------------

#: Debug pages; off unless asked for.
DEBUG = env_bool("DJANGO_DEBUG", False)
#: Install the demo app and its `demo.*` lambdas (`make demo`, the tests and the benchmarks set
#: it). Never in production: `demo.fail` kills its worker on request.
ATF_DEMO = env_bool("ATF_DEMO", False)
#: Secret key (sessions, CSRF, password resets). Required unless DJANGO_DEBUG or ATF_DEMO is
#: on, which fall back to a public development key.
SECRET_KEY = env_str("DJANGO_SECRET_KEY", "")
if not SECRET_KEY:
    if not (DEBUG or ATF_DEMO):
        raise SystemExit("DJANGO_SECRET_KEY is not set: give it a long random value "
                         "(or set DJANGO_DEBUG=1 for development)")
    SECRET_KEY = "!!!SET DJANGO_SECRET_KEY!!!-dev-only"
#: Host names this site answers to, comma separated.
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver")
#: Origins (scheme://host) trusted for CSRF-checked POSTs, e.g. the console's public https URL.
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", "")

# HTTPS. Each switch is off by default (the demo serves plain HTTP); the production
# configuration in docs/ turns them on, and `manage.py check --deploy` is then clean.

#: Send the session and CSRF cookies over HTTPS only.
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = env_bool("DJANGO_SECURE_COOKIES", False)
#: Redirect plain HTTP requests to HTTPS.
SECURE_SSL_REDIRECT = env_bool("DJANGO_SSL_REDIRECT", False)
#: Seconds browsers must use HTTPS only (Strict-Transport-Security); 0 sends no header.
SECURE_HSTS_SECONDS = env_int("DJANGO_HSTS_SECONDS", 0)
#: HSTS for subdomains too.
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_HSTS_INCLUDE_SUBDOMAINS", False)
#: Ask browsers to preload HSTS for this domain.
SECURE_HSTS_PRELOAD = env_bool("DJANGO_HSTS_PRELOAD", False)
#: `Header=value` a TLS-terminating proxy sets on HTTPS requests, e.g. `X-Forwarded-Proto=https`
#: (only behind a proxy that always sets or strips that header); empty trusts no header.
_proxy_header, _sep, _proxy_value = env_str("DJANGO_SECURE_PROXY_SSL_HEADER", "").partition("=")
SECURE_PROXY_SSL_HEADER = (
    ("HTTP_" + _proxy_header.strip().upper().replace("-", "_"), _proxy_value.strip())
    if _proxy_header.strip() else None
)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    # Django 6 has the tasks framework built in; on 5.2 the django-tasks backport provides it.
    *(["django_tasks"] if django.VERSION < (6, 0) else []),
    "tasks_core",
    "tasks_api",
    "tasks_console",
    "workers",
    *(["demo"] if ATF_DEMO else []),
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "atf_project.urls"
WSGI_APPLICATION = "atf_project.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        # The service's own templates (admin branding, error pages): a host project has its own.
        "DIRS": [BASE_DIR / "templates"],
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

# --- Task store -----------------------------------------------------------------------

#: The task store: `sqlite:///path` (embedded default) or `postgres://user@host:port/name`.
#: Set but empty counts as unset (a lambda host's environment often carries `DATABASE_URL=`).
#: A primary and its standbys: `postgres://user@db-a:5432,db-b:5432/name?target_session_attrs=
#: read-write` (each connection finds the primary; atf_project/database_url.py). The query
#: string's parameters are the connection's options (sslmode, target_session_attrs, ...).
DATABASE_URL = os.environ.get("DATABASE_URL") or f"sqlite:///{BASE_DIR / 'atf.sqlite3'}"
#: Name of the database the test suite creates (pytest-django); one per concurrent run.
ATF_TEST_DATABASE_NAME = env_str("ATF_TEST_DATABASE_NAME", "test_atf")

#: Seconds a web process keeps its database connection between requests (0: a new connection
#: for every request, which costs more than the request itself). Checked before reuse.
ATF_DB_CONN_MAX_AGE = env_int("ATF_DB_CONN_MAX_AGE", 300)

#: Connections a web process keeps in one pool that all its request threads share (0: no
#: pool; each thread keeps its own connection). The API's gunicorn config sets it, so the
#: hundreds of threads that hold remote workers' waiting claims share a few connections.
ATF_DB_POOL_SIZE = env_int("ATF_DB_POOL_SIZE", 0)

_pooled = ATF_DB_POOL_SIZE > 0 and DATABASE_URL.startswith(("postgres", "postgis"))
try:
    _database = database_url.parse(DATABASE_URL,
                                   conn_max_age=0 if _pooled else ATF_DB_CONN_MAX_AGE,
                                   conn_health_checks=True)
except ValueError as exc:
    raise SystemExit(f"DATABASE_URL: {exc}") from None
if _database["ENGINE"] == "django.db.backends.sqlite3":
    # Several processes (API, consumer, workers) share one file in the demo: WAL lets readers
    # run beside the writer, IMMEDIATE takes the write lock at BEGIN so that two writers never
    # deadlock upgrading a read lock, and the timeout waits for the lock instead of failing.
    _database["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    _database["TEST"] = {"NAME": str(BASE_DIR / "var" / f"{ATF_TEST_DATABASE_NAME}.sqlite3")}
else:
    _database["OPTIONS"] = {"connect_timeout": 5, **_database.get("OPTIONS", {})}
    if _pooled:  # a request that finds the pool empty waits for a connection, then gets 503
        _database["OPTIONS"]["pool"] = {"min_size": 1, "max_size": ATF_DB_POOL_SIZE,
                                        "timeout": 10}
    _database["TEST"] = {"NAME": ATF_TEST_DATABASE_NAME}
DATABASES = {"default": _database}

#: A store sharded across several PostgreSQL primaries (tasks_core.shards): their URLs,
#: comma-separated, become the aliases shard0, shard1, ... in this order (slot 0 first); a URL
#: equal to DATABASE_URL is `default` itself. DATABASE_URL keeps the control data. A shard's
#: URL may name its primary and standbys (several hosts, as DATABASE_URL may).
_SHARD_URLS = database_url.split_list(os.environ.get("ATF_SHARD_URLS", ""))
if _SHARD_URLS:
    ATF_STORE_SHARDS = []
    for _slot, _url in enumerate(_SHARD_URLS):
        _alias = "default" if _url == DATABASE_URL else f"shard{_slot}"
        if _alias != "default":
            try:
                _shard = database_url.parse(_url, conn_max_age=0 if _pooled
                                            else ATF_DB_CONN_MAX_AGE, conn_health_checks=True)
            except ValueError as exc:
                raise SystemExit(f"ATF_SHARD_URLS: {exc}") from None
            _shard["OPTIONS"] = {**_database["OPTIONS"], **_shard.get("OPTIONS", {})}
            _shard["TEST"] = {"NAME": f"{ATF_TEST_DATABASE_NAME}_{_alias}"}
            DATABASES[_alias] = _shard
        ATF_STORE_SHARDS.append(_alias)
DATABASE_ROUTERS = ["tasks_core.shards.Router"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Queues, wake-ups, cache ----------------------------------------------------------

#: Redis for the queues, the consumer's wake-ups and the cache.
REDIS_URL = env_str("REDIS_URL", "redis://127.0.0.1:6379/0")
ATF_REDIS_URL = REDIS_URL
#: The SQS backend's region, under AWS's own variable name.
ATF_SQS_REGION = env_str("AWS_DEFAULT_REGION", conf.AtfSettings.sqs_region)

CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": REDIS_URL,
        "OPTIONS": {"IGNORE_EXCEPTIONS": True},
    }
}

# --- Demo -----------------------------------------------------------------------------

#: Team that owns the `demo.*` lambdas.
ATF_DEMO_TEAM = env_str("ATF_DEMO_TEAM", "demo")

# --- Every other ATF setting, from the variable of its own name ------------------------

# Each read as its type says (tasks_core.conf.parse): a list comma separated, a time limit's
# "0", "none" or empty as no limit.
globals().update({name: value for name, value in environment.atf_settings(os.environ).items()
                  if name not in globals()})

# --- API ------------------------------------------------------------------------------

#: Largest request body in bytes (413 above it): room for a full batch of small payloads.
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("ATF_MAX_REQUEST_BYTES", 16 * 1024 * 1024)

# The API's own policy (its views use it in any project, tasks_api/policy.py).
REST_FRAMEWORK = copy.deepcopy(api_defaults.REST_FRAMEWORK)

SPECTACULAR_SETTINGS = {
    **api_defaults.SCHEMA_SETTINGS,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "SERVE_PERMISSIONS": api_defaults.REST_FRAMEWORK["DEFAULT_PERMISSION_CLASSES"],
}

# --- Django tasks API -----------------------------------------------------------------

# `@task` functions (`django.tasks` on Django 6, the django-tasks backport on 5.2) run as ATF
# tasks of the lambda `django_tasks.run` (or of their own, `@task(lambda_name=...)`); QUEUES
# empty allows any queue_name (it becomes the collection). A worker runs the @task functions
# of installed apps' `tasks` modules and of the modules named in ATF_DJANGO_TASKS_MODULES
# (comma-separated), and no others.
TASKS = {"default": {"BACKEND": "tasks_core.contrib.django_tasks.ATFBackend", "QUEUES": [],
                     "OPTIONS": {"MODULES": env_list("ATF_DJANGO_TASKS_MODULES", "")}}}

# --- The rest -------------------------------------------------------------------------

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

LOGIN_URL = "admin:login"

#: Log level of the `tasks_core` and `workers` loggers (tasks_core.conf), and of `demo`.
ATF_LOG_LEVEL = env_str("ATF_LOG_LEVEL", "INFO")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "line": {"format": logs.LINE_FORMAT},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "line"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
    "loggers": {
        # tasks_core and workers take ATF_LOG_LEVEL when the apps load (tasks_core.logs).
        "demo": {"level": ATF_LOG_LEVEL},
        # Django's task lines in ATF's line too (on Django 6 `django.tasks` is under `django`,
        # whose console handler would also write them bare under DEBUG); the level stays
        # Django's.
        logs.DJANGO_TASKS_LOGGER: {"handlers": ["console"], "propagate": False},
    },
}
