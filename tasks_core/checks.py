"""System checks of the ATF settings (`manage.py check`): values that cannot work are errors.

| id | when |
|---|---|
| atf.E001 | ATF_QUEUE_BACKEND is neither "redis" nor "sqs" |
| atf.E002 | ATF_REDIS_URL is missing or not a redis://, rediss:// or unix:// URL |
| atf.E003 | a heartbeat timeout is not over three heartbeat intervals (see `workers.checks`) |
| atf.E004 | ATF_PRIORITIES is not a non-empty list of distinct names |
| atf.E005 | ATF_DEFAULT_PRIORITY is not one of ATF_PRIORITIES |
| atf.E006 | a number setting is not a number, or is negative (zero where it must be positive) |
| atf.E007 | tasks_api installed without rest_framework or tasks_core (in `tasks_api.checks`) |
| atf.E008 | ATF_LOG_LEVEL is not a logging level's name |
| atf.E009 | a setting needs the database session that a pooler in transaction mode drops |
| atf.E010 | ATF_STORE_SHARDS names unknown, repeated or non-PostgreSQL aliases; no router |
| atf.W001 | tasks_api installed without drf_spectacular (the docs page cannot render) |
| atf.W002 | tasks_api installed without drf_spectacular_sidecar (the docs page has no Swagger UI) |
| atf.W003 | REST_FRAMEWORK sets what DRF applies to all views, ATF's too (`tasks_api.checks`) |
| atf.W004 | an `ATF_*` setting that ATF does not know (most likely misspelt) |
| atf.W005 | an `ATF_*` environment variable nothing reads (`atf_project.environment`) |
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core import checks
from django.db import DatabaseError

from tasks_core import conf, logs, pooling, redaction, shards
from tasks_core.conf import atf_settings

logger = logging.getLogger(__name__)

QUEUE_BACKENDS = ("redis", "sqs")
REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
#: Number settings for which zero makes no sense; the others may be zero.
POSITIVE = frozenset({
    "ATF_MAX_PAYLOAD_BYTES", "ATF_MAX_RESULT_BYTES", "ATF_MAX_PAYLOAD_DEPTH",
    "ATF_MAX_BATCH_SIZE", "ATF_MAX_BATCH_PARENTS",
    "ATF_MAX_IDEMPOTENCY_KEY_LENGTH", "ATF_MAX_ATTEMPTS", "ATF_HEARTBEAT_TIMEOUT_S",
    "ATF_HEARTBEAT_INTERVAL_S", "ATF_ENQUEUE_TIMEOUT_S", "ATF_CLAIM_TIMEOUT_S",
    "ATF_POLL_INTERVAL_S", "ATF_CONSUMER_BATCH_SIZE", "ATF_WORKER_THREADS",
    "ATF_WORKER_ASYNC_SLOTS", "ATF_WORKER_STALE_S", "ATF_API_PAGE_SIZE", "ATF_METRICS_WINDOW_S",
    "ATF_SQS_VISIBILITY_TIMEOUT_S",
})


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _queue_errors() -> list[checks.CheckMessage]:
    errors: list[checks.CheckMessage] = []
    if atf_settings.queue_backend not in QUEUE_BACKENDS:
        errors.append(checks.Error(
            f"unknown ATF_QUEUE_BACKEND {atf_settings.queue_backend!r}",
            hint="Use 'redis' or 'sqs'.", id="atf.E001"))
    url = atf_settings.redis_url
    if not isinstance(url, str) or not url.startswith(REDIS_SCHEMES):
        errors.append(checks.Error(
            f"ATF_REDIS_URL is {redaction.url(url) if isinstance(url, str) else url!r}; "
            "ATF needs Redis for its queues and wake-ups",
            hint="Set ATF_REDIS_URL, e.g. 'redis://127.0.0.1:6379/0'.", id="atf.E002"))
    return errors


def _priority_errors() -> list[checks.CheckMessage]:
    names = atf_settings.priorities
    if (not isinstance(names, list | tuple) or not names
            or not all(isinstance(name, str) and name for name in names)
            or len(set(names)) != len(names)):
        return [checks.Error(f"ATF_PRIORITIES is {names!r}",
                             hint="A list of distinct names, highest first.", id="atf.E004")]
    if atf_settings.default_priority not in names:
        return [checks.Error(
            f"ATF_DEFAULT_PRIORITY {atf_settings.default_priority!r} is not in ATF_PRIORITIES",
            hint=f"Use one of {', '.join(names)}.", id="atf.E005")]
    return []


def _number_errors() -> list[checks.CheckMessage]:
    errors: list[checks.CheckMessage] = []
    for name, default in conf.defaults().items():
        if not _is_number(default):
            continue
        value = conf.value(name)
        least = "over 0" if name in POSITIVE else "0 or more"
        if not _is_number(value) or value < 0 or (value == 0 and name in POSITIVE):
            errors.append(checks.Error(f"{name} is {value!r}; it must be a number {least}",
                                       id="atf.E006"))
    return errors


def _log_level_errors() -> list[checks.CheckMessage]:
    if logs.level_number(atf_settings.log_level) is not None:
        return []
    return [checks.Error(f"ATF_LOG_LEVEL is {atf_settings.log_level!r}",
                         hint="Use DEBUG, INFO, WARNING, ERROR or CRITICAL.", id="atf.E008")]


def _unknown_name_warnings() -> list[checks.CheckMessage]:
    """An `ATF_*` setting that ATF does not know is most likely misspelt: it would be ignored."""
    names = [name for name in dir(settings) if name.startswith(conf.PREFIX)]
    return [checks.Warning(
        f"{name} is not an ATF setting; it is ignored",
        hint=f"Did you mean {close}?" if close else "See the settings reference.", id="atf.W004")
            for name, close in sorted(conf.unknown_names(names).items())]


def _shard_errors() -> list[checks.CheckMessage]:
    """What keeps ATF_STORE_SHARDS from working (tasks_core.shards); nothing for one alias."""
    names = list(atf_settings.store_shards or [])
    if names in ([], [shards.CONTROL]):
        return []
    problems = []
    if unknown := [name for name in names if name not in settings.DATABASES]:
        problems.append(f"names no database of DATABASES: {', '.join(map(str, unknown))}")
    if len(set(names)) < len(names):
        problems.append("names an alias twice")
    if len(names) > shards.MAX_SHARDS:
        problems.append(f"names {len(names)} aliases; ids have room for {shards.MAX_SHARDS}")
    if others := [name for name in names if name in settings.DATABASES and "postgresql" not in
                  settings.DATABASES[name].get("ENGINE", "")]:
        problems.append(f"names databases that are not PostgreSQL: {', '.join(others)}")
    if "tasks_core.shards.Router" not in getattr(settings, "DATABASE_ROUTERS", []):
        problems.append("is set without 'tasks_core.shards.Router' in DATABASE_ROUTERS")
    return [checks.Error(f"ATF_STORE_SHARDS {problem}", id="atf.E010",
                         hint="See docs/production.md, a task store sharded across several "
                              "PostgreSQL primaries.") for problem in problems]


def settings_errors() -> list[checks.CheckMessage]:
    """Every problem with the ATF settings of tasks_core, in id order."""
    return (_queue_errors() + _priority_errors() + _number_errors() + _log_level_errors()
            + _shard_errors() + _unknown_name_warnings())


@checks.register("atf")
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    return settings_errors()


# Tagged `database` only, not `atf`: from Django 6.0, run_checks(tags=[...]) hands every
# database to the checks it selects (5.2 handed None), so an `atf` tag would connect wherever
# ATF's checks run (tests, `check --tag atf`).
@checks.register(checks.Tags.database)
def check_database_session(app_configs: Any = None, databases: Any = None,
                           **kwargs: Any) -> list[checks.CheckMessage]:
    """Run only when asked (`manage.py check --database default`, or a long-running command's
    start): it connects. A database it cannot reach is not its finding: whatever needs that
    database says so, in its own words (runconsumer and runworker in one line)."""
    errors: list[checks.CheckMessage] = []
    for alias in databases or ():
        try:
            problem = pooling.probe(alias)
        except DatabaseError as exc:
            logger.debug("atf.E009 not probed on %s: %s", alias, exc)
            continue
        if problem is not None:
            errors.append(checks.Error(problem, id="atf.E009"))
    return errors
