"""Settings for ATF for Django.

Every setting that an operator may change is read here, once, from the environment, with a
local default and a `#:` line saying what it means. Other code reads `django.conf.settings`.
"""

from __future__ import annotations

import os
from pathlib import Path

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent.parent


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def env_float(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


def env_bool(name: str, default: bool) -> bool:
    return os.environ.get(name, str(default)).strip().lower() in {"1", "true", "yes", "on"}


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


# --- Django ---------------------------------------------------------------------------

#: Secret key; the default is only fit for development.
SECRET_KEY = env_str("DJANGO_SECRET_KEY", "!!!SET DJANGO_SECRET_KEY!!!-dev-only")
#: Debug pages; off unless asked for.
DEBUG = env_bool("DJANGO_DEBUG", False)
#: Host names this site answers to, comma separated.
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_tasks",
    "tasks_core",
    "tasks_api",
    "tasks_console",
    "workers",
    "demo",
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
DATABASE_URL = env_str("DATABASE_URL", f"sqlite:///{BASE_DIR / 'atf.sqlite3'}")
#: Name of the database the test suite creates (pytest-django); one per concurrent run.
ATF_TEST_DATABASE_NAME = env_str("ATF_TEST_DATABASE_NAME", "test_atf")

#: Seconds a web process keeps its database connection between requests (0: a new connection
#: for every request, which costs more than the request itself). Checked before reuse.
ATF_DB_CONN_MAX_AGE = env_int("ATF_DB_CONN_MAX_AGE", 300)

_database = dj_database_url.parse(DATABASE_URL, conn_max_age=ATF_DB_CONN_MAX_AGE,
                                  conn_health_checks=True)
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
    _database["OPTIONS"] = {"connect_timeout": 5}
    _database["TEST"] = {"NAME": ATF_TEST_DATABASE_NAME}
DATABASES = {"default": _database}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Queues, wake-ups, cache ----------------------------------------------------------

#: Redis for the queues, the consumer's wake-ups and the cache.
REDIS_URL = env_str("REDIS_URL", "redis://127.0.0.1:6379/0")
#: Queue service: "redis" or "sqs".
ATF_QUEUE_BACKEND = env_str("ATF_QUEUE_BACKEND", "redis")
#: SQS endpoint (a local SQS-compatible server in tests); unset means AWS itself.
ATF_SQS_ENDPOINT_URL = os.environ.get("ATF_SQS_ENDPOINT_URL") or None
#: SQS region.
ATF_SQS_REGION = env_str("AWS_DEFAULT_REGION", "us-east-1")
#: Seconds a message popped from SQS stays invisible before SQS delivers it again (unless acked).
ATF_SQS_VISIBILITY_TIMEOUT_S = env_int("ATF_SQS_VISIBILITY_TIMEOUT_S", 30)
#: REDIS_URL names one node of a Redis Cluster (its database must be 0); queues use RedisCluster.
ATF_REDIS_CLUSTER = env_bool("ATF_REDIS_CLUSTER", False)
#: Prefix of every queue name and Redis key, so several deployments can share one server.
ATF_QUEUE_PREFIX = env_str("ATF_QUEUE_PREFIX", "atf")

CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": REDIS_URL,
        "OPTIONS": {"IGNORE_EXCEPTIONS": True},
    }
}

# --- Scheduling -----------------------------------------------------------------------

#: Priority names, highest first.
ATF_PRIORITIES = env_list("ATF_PRIORITIES", "high,default,low")
#: Priority of a task scheduled without one.
ATF_DEFAULT_PRIORITY = env_str("ATF_DEFAULT_PRIORITY", "default")
#: Largest payload accepted, in bytes of its JSON text.
ATF_MAX_PAYLOAD_BYTES = env_int("ATF_MAX_PAYLOAD_BYTES", 256 * 1024)
#: Deepest nesting of objects and arrays in a payload.
ATF_MAX_PAYLOAD_DEPTH = env_int("ATF_MAX_PAYLOAD_DEPTH", 100)
#: Most tasks in one schedule_many call or batch request.
ATF_MAX_BATCH_SIZE = env_int("ATF_MAX_BATCH_SIZE", 1000)
#: Longest idempotency key accepted.
ATF_MAX_IDEMPOTENCY_KEY_LENGTH = env_int("ATF_MAX_IDEMPOTENCY_KEY_LENGTH", 200)
#: Team that owns a lambda registered without `team=`.
ATF_DEFAULT_TEAM = env_str("ATF_DEFAULT_TEAM", "default")
#: Team that owns the `demo.*` lambdas.
ATF_DEMO_TEAM = env_str("ATF_DEMO_TEAM", "demo")

# --- Lifecycle defaults (a lambda may override the per-lambda ones) --------------------

#: Attempts before a failing task goes to the dead-letter queue.
ATF_MAX_ATTEMPTS = env_int("ATF_MAX_ATTEMPTS", 5)
#: Seconds a running task may go without a heartbeat before it is enqueued again.
ATF_HEARTBEAT_TIMEOUT_S = env_float("ATF_HEARTBEAT_TIMEOUT_S", 30.0)
#: Seconds between two heartbeats of a running task (must be under heartbeat timeout / 3).
ATF_HEARTBEAT_INTERVAL_S = env_float("ATF_HEARTBEAT_INTERVAL_S", 5.0)
#: Seconds an enqueued task may wait unclaimed before it is enqueued again.
ATF_ENQUEUE_TIMEOUT_S = env_float("ATF_ENQUEUE_TIMEOUT_S", 60.0)
#: Seconds a claimed task may wait unstarted before it is enqueued again.
ATF_CLAIM_TIMEOUT_S = env_float("ATF_CLAIM_TIMEOUT_S", 30.0)
#: Backoff of retriable failures: min(cap, base * 2**attempt) times a random factor.
ATF_BACKOFF_BASE_S = env_float("ATF_BACKOFF_BASE_S", 1.0)
#: Longest backoff delay.
ATF_BACKOFF_CAP_S = env_float("ATF_BACKOFF_CAP_S", 600.0)

# --- Processes ------------------------------------------------------------------------

#: The store consumer's longest sleep between two polls.
ATF_POLL_INTERVAL_S = env_float("ATF_POLL_INTERVAL_S", 0.5)
#: Due rows the consumer takes in one batch, across all lambdas.
ATF_CONSUMER_BATCH_SIZE = env_int("ATF_CONSUMER_BATCH_SIZE", 500)
#: Seconds a loop waits after an unexpected error before it goes on.
ATF_RESTART_DELAY_S = env_float("ATF_RESTART_DELAY_S", 1.0)
#: Executor threads per worker process.
ATF_WORKER_THREADS = env_int("ATF_WORKER_THREADS", 8)
#: Seconds a stopping worker lets running tasks finish before it exits.
ATF_SHUTDOWN_GRACE_S = env_float("ATF_SHUTDOWN_GRACE_S", 30.0)
#: A worker whose last_seen is older than this is shown as gone.
ATF_WORKER_STALE_S = env_float("ATF_WORKER_STALE_S", 60.0)
#: Seconds after which finished tasks are deleted by the consumer (0 keeps them forever).
ATF_RETENTION_S = env_float("ATF_RETENTION_S", 7 * 24 * 3600.0)
#: A periodic occurrence later than this (consumers down) is handled by its catch-up policy.
ATF_PERIODIC_GRACE_S = env_float("ATF_PERIODIC_GRACE_S", 10.0)

# --- API ------------------------------------------------------------------------------

#: Requests per token, e.g. "6000/min"; empty turns throttling off.
ATF_API_THROTTLE_RATE = env_str("ATF_API_THROTTLE_RATE", "100000/min")
#: Largest request body in bytes (413 above it): room for a full batch of small payloads.
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("ATF_MAX_REQUEST_BYTES", 16 * 1024 * 1024)
#: Tasks per page of a list, unless the caller asks for another `page_size` (at most 1000).
ATF_API_PAGE_SIZE = env_int("ATF_API_PAGE_SIZE", 100)
#: Serve /metrics without a token (for scrapers that cannot send one); it shows every lambda.
ATF_METRICS_PUBLIC = env_bool("ATF_METRICS_PUBLIC", False)
#: Seconds of recent history behind the delivery-latency histogram of /metrics.
ATF_METRICS_WINDOW_S = env_float("ATF_METRICS_WINDOW_S", 300.0)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["tasks_api.parsers.SafeJSONParser"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_THROTTLE_CLASSES": ["tasks_api.throttling.TokenRateThrottle"],
    "EXCEPTION_HANDLER": "tasks_api.exceptions.exception_handler",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "ATF for Django",
    "DESCRIPTION": "Schedule and follow asynchronous tasks.",
    "VERSION": "1.0.0",
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {"GateStateEnum": ["open", "paused", "dropped"]},
}

# --- Django tasks API -----------------------------------------------------------------

# `@task` functions (django-tasks, `django.tasks` in Django 6.0) run as ATF tasks of the lambda
# `django_tasks.run`; QUEUES empty allows any queue_name (it becomes the collection).
TASKS = {"default": {"BACKEND": "tasks_core.contrib.django_tasks.ATFBackend", "QUEUES": []}}

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

#: Log level of the `tasks_core` and `workers` loggers.
ATF_LOG_LEVEL = env_str("ATF_LOG_LEVEL", "INFO")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "line": {"format": "%(asctime)s %(levelname)s %(processName)s %(name)s: %(message)s"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "line"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
    "loggers": {
        "tasks_core": {"level": ATF_LOG_LEVEL},
        "workers": {"level": ATF_LOG_LEVEL},
        "demo": {"level": ATF_LOG_LEVEL},
    },
}
