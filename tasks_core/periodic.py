"""Periodic tasks: schedules defined in code, and turning due occurrences into ordinary tasks.

Occurrences are a pure function of a schedule: a cron expression read in the schedule's time
zone, or whole multiples of `interval_s` since the Unix epoch (every 300 s runs at :00, :05, ...).
So every consumer computes the same occurrences, and the idempotency key
`periodic:<name>:<occurrence>` turns each into exactly one task, however many consumers run.

Catch-up policy: an occurrence found more than ATF_PERIODIC_GRACE_S late (every consumer was
down) does not pile up. `once` schedules one task for all the missed occurrences, `skip`
schedules none; both then go on with the next future occurrence.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter
from django.conf import settings
from django.db import transaction
from django.db.models import F, Q, QuerySet, Window
from django.db.models.functions import RowNumber

from tasks_core import directory, scheduling
from tasks_core.conf import atf_settings
from tasks_core.exceptions import (
    AtfError,
    ConfigurationError,
    InvalidTask,
    InvalidTransition,
    LambdaNotFound,
    LimitReached,
)
from tasks_core.models import PeriodicTask

logger = logging.getLogger(__name__)

CatchUp = PeriodicTask.CatchUp

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: Due schedules one materialise_due() call takes (the rest wait for the next call).
BATCH_SIZE = 100
#: Occurrences of one schedule materialised in one call when it is on time.
MAX_OCCURRENCES_PER_CALL = 100

#: Longest interval between two occurrences: ten years (its multiples must stay datetimes).
MAX_INTERVAL_S = 10 * 366 * 86400.0
#: A cron expression is refused unless it has an occurrence after this (a non-leap year start,
#: so "0 0 29 2 *" is found in 2004; "0 0 30 2 *" never is).
_NEVER_DUE_PROBE = datetime(2001, 1, 1, tzinfo=UTC)
#: Seconds a schedule waits after its occurrences failed with an unexpected error (its row
#: records the error; the other schedules of the pass go on).
RETRY_AFTER_ERROR_S = 60.0
#: Characters of a schedule's last error that its row keeps.
ERROR_CHARS = 500

#: A schedule given to atf.every / atf.register(schedule=): cron text, seconds or a timedelta.
ScheduleValue = str | int | float | timedelta


@dataclass(frozen=True, kw_only=True)
class Spec:
    """A periodic task defined in code; sync_code_schedules() keeps a PeriodicTask row for it."""

    name: str
    lambda_name: str
    cron: str = ""
    interval_s: float | None = None
    timezone: str = "UTC"
    payload: Any = field(default_factory=dict)
    collection: str = "default"
    priority: str | None = None  #: None: ATF_DEFAULT_PRIORITY
    catch_up: str = CatchUp.ONCE


_lock = threading.Lock()
_specs: dict[str, Spec] = {}


# --- occurrences (pure) ------------------------------------------------------------------


def parse_schedule(schedule: ScheduleValue) -> tuple[str, float | None]:
    """(cron, interval_s) of a schedule value; ConfigurationError if it is not a valid one."""
    if isinstance(schedule, timedelta):
        schedule = schedule.total_seconds()
    if isinstance(schedule, bool):
        raise ConfigurationError(f"not a schedule: {schedule!r}")
    if isinstance(schedule, int | float):
        if not 1 <= schedule <= MAX_INTERVAL_S:  # also refuses NaN
            raise ConfigurationError(
                f"an interval must be from 1 to {MAX_INTERVAL_S:g} seconds, not {schedule!r}")
        return "", float(schedule)
    if isinstance(schedule, str) and croniter.is_valid(schedule.strip()):
        _check_ever_due(schedule.strip())
        return schedule.strip(), None
    raise ConfigurationError(
        f"not a schedule: {schedule!r}; give a cron expression such as '*/5 * * * *' or seconds"
    )


def _check_ever_due(cron: str) -> None:
    """ConfigurationError for a valid cron expression that names no date, e.g. "0 0 30 2 *"."""
    try:
        croniter(cron, _NEVER_DUE_PROBE).get_next(datetime)
    except CroniterError as exc:
        raise ConfigurationError(f"the cron expression {cron!r} is never due") from exc


def check_timezone(name: str) -> ZoneInfo:
    """The time zone called `name`; ConfigurationError if there is none."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ConfigurationError(f"unknown time zone {name!r}") from exc


def timing_errors(*, cron: str, interval_s: float | None, tz: str) -> dict[str, list[str]]:
    """Field name ("cron", "interval_s", "timezone") -> what is wrong with this timing; empty
    when it is exactly one valid schedule in a known time zone."""
    errors: dict[str, list[str]] = {}
    if bool(cron) == (interval_s is not None):
        both = "give a cron expression or an interval, not both or neither"
        errors["cron"] = errors["interval_s"] = [both]
    else:
        try:
            parse_schedule(cron or interval_s)  # type: ignore[arg-type]
        except ConfigurationError as exc:
            errors["cron" if cron else "interval_s"] = [str(exc)]
    try:
        check_timezone(tz)
    except ConfigurationError as exc:
        errors["timezone"] = [str(exc)]
    return errors


def check_timing(*, cron: str, interval_s: float | None, tz: str) -> None:
    """Raise ConfigurationError unless this is exactly one valid schedule in a known time zone
    (for forms that edit PeriodicTask rows)."""
    if errors := timing_errors(cron=cron, interval_s=interval_s, tz=tz):
        raise ConfigurationError("; ".join(dict.fromkeys(m for ms in errors.values() for m in ms)))


def next_after(after: datetime, *, cron: str, interval_s: float | None, tz: str) -> datetime:
    """The first occurrence strictly after `after`, in UTC."""
    if interval_s:
        step = timedelta(seconds=interval_s)
        return EPOCH + ((after - EPOCH) // step + 1) * step
    occurrences = croniter(cron, after.astimezone(check_timezone(tz)))
    found = occurrences.get_next(datetime)
    # When summer time ends, the clock shows one hour twice (fold=1 the second time). Like
    # cron, a job at a fixed hour runs once; one whose hour is "*" runs in both. The hour is
    # read from the expanded fields, so macros such as "@hourly" have one too.
    every_hour = occurrences.expressions[1] == "*"
    while found.fold == 1 and not every_hour:
        found = occurrences.get_next(datetime)
    return found.astimezone(UTC)


def occurrence_key(name: str, occurrence: datetime) -> str:
    """The idempotency key of one occurrence of the schedule `name` (at most 200 characters)."""
    if len(name) > 120:  # keep the key under ATF_MAX_IDEMPOTENCY_KEY_LENGTH
        name = f"{name[:80]}~{hashlib.sha256(name.encode()).hexdigest()[:16]}"
    return f"periodic:{name}:{occurrence.astimezone(UTC).isoformat()}"


def _row_next_after(row: PeriodicTask, after: datetime) -> datetime:
    return next_after(after, cron=row.cron, interval_s=row.interval_s, tz=row.timezone)


# --- schedules in code -------------------------------------------------------------------


def every(schedule: ScheduleValue, lambda_name: str, payload: Any = None, *,
          name: str | None = None, timezone: str | None = None, collection: str = "default",
          priority: str | None = None, catch_up: str = CatchUp.ONCE) -> Spec:
    """Define a periodic task in code: run `lambda_name` with `payload` on `schedule`.

    `schedule` is a cron expression (read in `timezone`, default settings.TIME_ZONE), or an
    interval in seconds or as a timedelta. The row appears when the consumer starts.
    """
    cron, interval_s = parse_schedule(schedule)
    tz = timezone or settings.TIME_ZONE
    check_timezone(tz)
    if catch_up not in CatchUp.values:
        raise ConfigurationError(f"catch_up must be one of {', '.join(CatchUp.values)}")
    if priority is not None and priority not in atf_settings.priorities:
        raise ConfigurationError(f"unknown priority {priority!r}")
    spec = Spec(name=name or f"{lambda_name}@{cron or f'{interval_s:g}s'}",
                lambda_name=lambda_name, cron=cron, interval_s=interval_s, timezone=tz,
                payload={} if payload is None else payload, collection=collection,
                priority=priority, catch_up=catch_up)
    with _lock:
        if spec.name in _specs:
            raise ConfigurationError(f"periodic task {spec.name!r} is defined already")
        _specs[spec.name] = spec
    return spec


def forget(name: str) -> None:
    """Drop a code definition (tests that define their own)."""
    with _lock:
        _specs.pop(name, None)


def specs() -> list[Spec]:
    with _lock:
        return sorted(_specs.values(), key=lambda spec: spec.name)


def sync_code_schedules() -> None:
    """Create or update a PeriodicTask row per schedule defined in code.

    Code owns these rows: a changed schedule starts again from its next occurrence, and a row
    whose definition left the code is disabled (kept for its history).
    """
    defined = specs()
    with transaction.atomic():
        for spec in defined:
            try:
                lambda_id = directory.by_name(spec.lambda_name).id
            except LambdaNotFound:
                logger.error("periodic task %s names unknown lambda %s; not synced", spec.name,
                             spec.lambda_name, extra={"action": "periodic_unknown_lambda"})
                continue
            _sync_one(spec, lambda_id)
        gone = PeriodicTask.objects.filter(in_code=True, enabled=True).exclude(
            name__in=[spec.name for spec in defined]
        ).update(enabled=False, next_run_at=None)
    if gone:
        logger.info("disabled %d periodic task(s) no longer defined in code", gone)
    logger.debug("synced %d periodic task(s) defined in code", len(defined))


def _sync_one(spec: Spec, lambda_id: int) -> None:
    fields: Mapping[str, Any] = {
        "lambda_ref_id": lambda_id, "cron": spec.cron, "interval_s": spec.interval_s,
        "timezone": spec.timezone, "payload": spec.payload, "collection": spec.collection,
        "priority": spec.priority or atf_settings.default_priority, "catch_up": spec.catch_up,
        "enabled": True, "in_code": True,
    }
    # Consumers starting together may race to create the row: get_or_create settles it.
    team_id = directory.by_id(lambda_id).team_id
    row, created = PeriodicTask.objects.select_for_update().get_or_create(
        name=spec.name, team_id=team_id, defaults=fields)
    if created:
        return
    timing = ("cron", "interval_s", "timezone")
    moved = any(getattr(row, key) != fields[key] for key in timing) or not row.enabled
    changed = [key for key, value in fields.items() if getattr(row, key) != value]
    if not changed:
        return
    for key in changed:
        setattr(row, key, fields[key])
    if moved:
        row.next_run_at = None  # recomputed from the new timing on the next call
        changed.append("next_run_at")
    row.save(update_fields=changed)


# --- schedules defined by operators (API, console) --------------------------------------

def _request(row: PeriodicTask) -> scheduling.TaskRequest:
    """The task request an occurrence of `row` makes (its time and key set per occurrence)."""
    return scheduling.TaskRequest(row.lambda_ref.name, row.payload, collection=row.collection,
                                  priority=row.priority)


def check_row(row: PeriodicTask, *, now: datetime) -> None:
    """Raise InvalidTask with every field error of `row`: its timing, its name (taken in its
    lambda's team), and everything its occurrences would be refused for when scheduled
    (lambda, payload, collection, priority)."""
    errors = timing_errors(cron=row.cron, interval_s=row.interval_s, tz=row.timezone)
    team_id = row.lambda_ref.team_id
    if PeriodicTask.objects.filter(team_id=team_id, name=row.name).exclude(pk=row.pk).exists():
        errors["name"] = [f"A periodic task named {row.name!r} exists."]
    try:
        scheduling.validate(_request(row), now=now)
    except InvalidTask as exc:
        errors = {**exc.errors, **errors}
    if row.catch_up not in CatchUp.values:
        errors["catch_up"] = [f"Use one of {', '.join(CatchUp.values)}."]
    if errors:
        raise InvalidTask(errors)


def save_row(row: PeriodicTask, changes: Mapping[str, Any], *, now: datetime) -> PeriodicTask:
    """Create (`row` unsaved) or change an operator's schedule: set `changes`, check, save.

    Checks the result first (InvalidTask); a new timing, or enabling it again, starts from the
    next occurrence after now, as code schedules do.
    """
    if row.in_code:
        raise InvalidTransition(f"periodic task {row.name!r} is defined in code; change it there")
    timing = ("cron", "interval_s", "timezone")
    moved = any(getattr(row, key) != changes[key] for key in timing if key in changes)
    moved = moved or (changes.get("enabled") is True and not row.enabled)
    for key, value in changes.items():
        setattr(row, key, value)
    check_row(row, now=now)
    if row.pk is None or row.team_id != row.lambda_ref.team_id:
        check_team_room(row.lambda_ref.team_id)
    row.team_id = row.lambda_ref.team_id
    if moved:
        row.next_run_at = None  # the consumer computes it from the timing on its next call
    row.save()
    logger.info("periodic task %s saved", row.name, extra={"action": "periodic_saved",
                                                           "periodic": row.name})
    return row


def check_team_room(team_id: int) -> None:
    """LimitReached when the team has ATF_MAX_PERIODIC_TASKS_PER_TEAM operator schedules
    already (schedules defined in code do not count: the code's owner added them)."""
    limit = atf_settings.max_periodic_tasks_per_team
    if limit and PeriodicTask.objects.filter(team_id=team_id, in_code=False).count() >= limit:
        raise LimitReached(f"A team has at most {limit} periodic tasks "
                           "(ATF_MAX_PERIODIC_TASKS_PER_TEAM); delete one first.")


def delete_row(row: PeriodicTask) -> None:
    """Delete an operator's schedule (tasks it created stay)."""
    if row.in_code:
        raise InvalidTransition(f"periodic task {row.name!r} is defined in code; change it there")
    row.delete()
    logger.info("periodic task %s deleted", row.name, extra={"action": "periodic_deleted",
                                                             "periodic": row.name})


# --- the consumer's side -----------------------------------------------------------------


def materialise_due(*, now: datetime, budget_s: float | None = None,
                    cut: Callable[[], bool] = lambda: False) -> int:
    """Turn every due occurrence of enabled schedules into a task; return how many were created.

    Rows are locked with SKIP LOCKED, so concurrent consumers share the work; the
    per-occurrence idempotency key keeps it to one task even where locks are not available.
    Each row has a savepoint of its own: a row that fails is recorded and the others go on.
    Rows are taken in turns of the teams (each team's oldest first); with `budget_s`, no row
    after the first is begun once that many seconds have passed and the rest stay due for the
    next call, so one team's thousands of occurrences hold the caller (the consumer's loop)
    about that long; nor once `cut()` says so (the consumer's: a task scheduled to run now is
    waiting for its next pass).
    """
    deadline = None if budget_s is None else time.monotonic() + budget_s
    created = 0
    with transaction.atomic():
        due = list(_fair_due_ids(now))
        locked = {row.pk: row for row in
                  PeriodicTask.objects.select_for_update(skip_locked=True, of=("self",))
                  .select_related("lambda_ref").filter(pk__in=due)}
        for row in _in_turns([locked[pk] for pk in due if pk in locked]):
            created += _materialise_row(row, now)
            if (deadline is not None and time.monotonic() > deadline) or cut():
                break
    return created


#: Counts the calls of _in_turns: the team that goes first rotates from one call to the next.
_calls = itertools.count()


def _in_turns(rows: list[PeriodicTask]) -> list[PeriodicTask]:
    """`rows` (each team's in the order to run them) in turns of the teams: each team's first,
    then each team's second, ...; the team that goes first rotates from one call to the next,
    so a call that stops early (its budget spent) does not always serve the same team."""
    by_team: dict[int, list[PeriodicTask]] = defaultdict(list)
    for row in rows:
        by_team[row.team_id].append(row)
    teams = sorted(by_team)
    if teams:
        start = next(_calls) % len(teams)
        teams = teams[start:] + teams[:start]
    return [row for turn in itertools.zip_longest(*(by_team[team] for team in teams))
            for row in turn if row is not None]


def _fair_due_ids(now: datetime) -> QuerySet[PeriodicTask, int]:
    """Ids of at most BATCH_SIZE due schedules, the oldest of each team first: a team with
    thousands of due schedules takes its turn after every other team's oldest (PostgreSQL
    refuses FOR UPDATE beside a window function, hence a subquery)."""
    due = Q(next_run_at__lte=now) | Q(next_run_at__isnull=True)
    turn = Window(RowNumber(), partition_by=[F("team_id")],
                  order_by=F("next_run_at").asc(nulls_first=True))
    return (PeriodicTask.objects.filter(due, enabled=True).annotate(turn=turn)
            .order_by("turn", F("next_run_at").asc(nulls_first=True), "pk")
            .values_list("pk", flat=True)[:BATCH_SIZE])


def _materialise_row(row: PeriodicTask, now: datetime) -> int:
    """Schedule one row's due occurrences in a savepoint; a failure is recorded on the row."""
    try:
        with transaction.atomic():
            return _materialise_timing(row, now)
    except (ConfigurationError, CroniterError) as exc:
        # A bad cron or time zone typed in the console: stop it instead of failing every call.
        logger.error("periodic task %s disabled: %s", row.name, exc,
                     extra={"action": "periodic_disabled", "periodic": row.name})
        _record_error(row, f"disabled: {exc}", enabled=False)
    except Exception as exc:  # noqa: BLE001 - one row must not stop every team's schedules
        logger.exception("periodic task %s failed; retried in %g s", row.name,
                         RETRY_AFTER_ERROR_S, extra={"action": "periodic_failed",
                                                     "periodic": row.name})
        _record_error(row, f"{type(exc).__name__}: {exc}",
                      next_run_at=now + timedelta(seconds=RETRY_AFTER_ERROR_S))
    return 0


def _record_error(row: PeriodicTask, error: str, **fields: Any) -> None:
    fields["last_error"] = error[:ERROR_CHARS]
    PeriodicTask.objects.filter(pk=row.pk).update(**fields)


def _materialise_timing(row: PeriodicTask, now: datetime) -> int:
    if row.next_run_at is None:
        row.next_run_at = _row_next_after(row, now)
        row.last_error = ""
        row.save(update_fields=["next_run_at", "last_error"])
        return 0
    created, next_run_at = _due_occurrences(row, now)
    row.next_run_at = next_run_at
    row.last_error = ""
    if created:
        row.last_run_at = now
    row.save(update_fields=["next_run_at", "last_run_at", "last_error"])
    return created


def _due_occurrences(row: PeriodicTask, now: datetime) -> tuple[int, datetime]:
    """Schedule the row's due occurrences; (tasks created, the next occurrence after now)."""
    due = row.next_run_at
    assert due is not None
    grace = timedelta(seconds=atf_settings.periodic_grace_s)
    if now - due > grace:
        missed_created = 0
        if row.catch_up == CatchUp.ONCE:
            missed_created = _schedule(row, due, run_at=now, now=now)
        logger.info("periodic task %s: occurrences since %s missed; catch-up %s",
                    row.name, due.isoformat(), row.catch_up,
                    extra={"action": "periodic_catch_up", "periodic": row.name})
        return missed_created, _row_next_after(row, now)
    created = 0
    occurrence = due
    for _ in range(MAX_OCCURRENCES_PER_CALL):
        if occurrence > now:
            break
        created += _schedule(row, occurrence, run_at=occurrence, now=now)
        occurrence = _row_next_after(row, occurrence)
    return created, occurrence


def _schedule(row: PeriodicTask, occurrence: datetime, *, run_at: datetime,
              now: datetime) -> int:
    try:
        _task, created = scheduling.schedule(dataclasses.replace(
            _request(row), run_at=run_at, idempotency_key=occurrence_key(row.name, occurrence),
        ), now=now)
    except AtfError as exc:
        logger.error("periodic task %s: occurrence %s not scheduled: %s", row.name,
                     occurrence.isoformat(), exc, extra={"action": "periodic_failed"})
        return 0
    return int(created)
