"""Start-up checks shared by the long-running commands (fail fast, in one line), and the
system check of heartbeat timeouts (atf.E003; the other ATF checks are in tasks_core.checks)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from django.core import checks
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, connection

from tasks_core import checks as core_checks
from tasks_core import logs, queues, registry
from tasks_core.conf import atf_settings
from tasks_core.exceptions import AtfError
from tasks_core.heartbeat_rule import MAX_FAILED_HEARTBEATS, outlasts_heartbeats
from tasks_core.store import backends


def heartbeat_errors() -> list[checks.CheckMessage]:
    """atf.E003 for the default heartbeat timeout and each lambda's that a worker would outlive."""
    interval_s = atf_settings.heartbeat_interval_s
    default_s = atf_settings.heartbeat_timeout_s
    timeouts = {"ATF_HEARTBEAT_TIMEOUT_S": default_s}
    # A lambda that keeps the default is covered by the line about the default.
    timeouts.update((f"lambda {name}", timeout_s) for name in registry.names()
                    if (timeout_s := registry.get(name).options.heartbeat_timeout_s) != default_s)
    numbers = (interval_s, *timeouts.values())
    if not all(isinstance(n, int | float) and not isinstance(n, bool) for n in numbers):
        return []  # atf.E006 reports them
    return [
        checks.Error(
            f"{what}: heartbeat timeout {timeout_s}s is not over {MAX_FAILED_HEARTBEATS} x "
            f"ATF_HEARTBEAT_INTERVAL_S ({interval_s}s), so a task could run twice at once",
            hint="Raise the timeout or shorten ATF_HEARTBEAT_INTERVAL_S.", id="atf.E003")
        for what, timeout_s in timeouts.items() if not outlasts_heartbeats(timeout_s, interval_s)
    ]


@checks.register("atf")
def check_heartbeats(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    return heartbeat_errors()


def require_settings() -> None:
    """Raise CommandError naming the first ATF setting that cannot work (ids as in `check`).

    Only errors stop a process, and not those the project silences (SILENCED_SYSTEM_CHECKS):
    a warning (atf.W004, a misspelt setting) is printed once, by Django's system checks that
    run next, and a silenced one not at all."""
    errors = [message for message in core_checks.settings_errors() + heartbeat_errors()
              if message.is_serious() and not message.is_silenced()]
    if errors:
        first = errors[0]
        raise CommandError(f"{first.id}: {first.msg}" + (f" ({first.hint})" if first.hint else "")
                           + (f"; and {len(errors) - 1} more (manage.py check)"
                              if len(errors) > 1 else ""))


class LongRunningCommand(BaseCommand):
    """runconsumer and runworker: an ATF setting that cannot work stops them in one line, before
    Django's own system checks (whose report is a page) run; their log lines reach stderr in
    any project (`tasks_core.logs.for_command`).

    Only the checks that concern a process without a web server run: the URL, admin, template
    and static-file checks import the whole web side (the URLconf, DRF, the API schema, the
    console), megabytes that a worker or consumer would then carry for its whole life (see
    docs/benchmarks.md).
    `manage.py check` and the web server still run them all.
    """

    requires_system_checks = [
        "atf", checks.Tags.models, checks.Tags.caches, checks.Tags.compatibility,
        checks.Tags.signals, checks.Tags.async_support, checks.Tags.database,
    ]

    def check(self, *args: Any, **kwargs: Any) -> None:
        require_settings()
        super().check(*args, **kwargs)

    def execute(self, *args: Any, **options: Any) -> Any:
        # Before anything is logged: a project without LOGGING sees the command's lines too.
        logs.for_command(options["verbosity"])
        return super().execute(*args, **options)


def require_store_and_queue() -> queues.QueueBackend:
    """Check that the database and the queue service answer; return a queue client.

    Raises CommandError with a one-line reason otherwise.
    """
    with _database_reached():
        connection.ensure_connection()
    try:
        queue = queues.backend()
        queue.ping()
    except AtfError as exc:
        raise CommandError(str(exc)) from exc
    with _database_reached():
        # Chosen now, before a worker opens its pools: choosing asks the database, on two
        # connections of its own, whether connections keep their session (tasks_core.pooling),
        # and those would count against the pools' bound if asked at the first store call.
        backends.current()
    return queue


@contextlib.contextmanager
def _database_reached() -> Iterator[None]:
    """A database error within it becomes a CommandError of one line."""
    try:
        yield
    except DatabaseError as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CommandError(f"cannot reach the database: {first_line}") from exc


def setting_default(value: Any) -> Any:
    """A setting's value as an option's default. argparse reads a default given as text with the
    option's type, and would blame the option (`--threads`) for a bad setting nobody passed on
    the command line: a text default is left out, and check atf.E006 names the setting."""
    return None if isinstance(value, str) else value


def positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise ValueError(text)
    return value


def positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise ValueError(text)
    return value
