"""Periodic tasks: occurrences, one task per occurrence, catch-up after downtime, code sync."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import pytest
import redis
from django.utils import timezone

from tasks_core import lambda_sync, periodic, registry
from tasks_core.exceptions import ConfigurationError
from tasks_core.models import Lambda, PeriodicTask, TaskEntity
from tests.conftest import Processes, closing_connections, race, subprocess_env, wait_for
from tests.factories import LambdaFactory, TeamFactory

T0 = datetime(2026, 1, 5, 12, 0, 0, tzinfo=UTC)


def seconds(n: float) -> timedelta:
    return timedelta(seconds=n)


def every_second(lam: Lambda, *, catch_up: str = "once", **fields: Any) -> PeriodicTask:
    return PeriodicTask.objects.create(name="tick", lambda_ref=lam, interval_s=1.0,
                                       catch_up=catch_up, next_run_at=T0, **fields)


def run_ats(lam: Lambda) -> list[datetime]:
    return list(TaskEntity.objects.filter(lambda_ref=lam).order_by("run_at")
                .values_list("run_at", flat=True))


# --- occurrences -------------------------------------------------------------------------


@pytest.mark.parametrize(("after", "interval_s", "expected"), [
    (T0, 1.0, T0 + seconds(1)),
    (T0 + seconds(0.3), 1.0, T0 + seconds(1)),
    (T0 + seconds(59.9), 300.0, T0 + seconds(300)),
    (T0 - seconds(1e-6), 60.0, T0),
])
def test_interval_occurrences_are_aligned_to_the_epoch(after: datetime, interval_s: float,
                                                       expected: datetime) -> None:
    # Given an interval schedule, When asking for its next occurrence, Then it is a multiple
    assert periodic.next_after(after, cron="", interval_s=interval_s, tz="UTC") == expected


@pytest.mark.parametrize(("after", "expected"), [
    (datetime(2026, 1, 15, tzinfo=UTC), datetime(2026, 1, 15, 14, 0, tzinfo=UTC)),  # EST
    (datetime(2026, 7, 15, tzinfo=UTC), datetime(2026, 7, 15, 13, 0, tzinfo=UTC)),  # EDT
])
def test_cron_occurrences_follow_the_time_zone(after: datetime, expected: datetime) -> None:
    # Given "every day at 09:00" in New York
    # When asking for the next occurrence in winter and in summer
    found = periodic.next_after(after, cron="0 9 * * *", interval_s=None, tz="America/New_York")
    # Then it is 09:00 local time, whatever the UTC offset
    assert found == expected


def walk(cron: str, start: datetime, count: int) -> list[datetime]:
    found = [periodic.next_after(start, cron=cron, interval_s=None, tz="Europe/Paris")]
    while len(found) < count:
        found.append(periodic.next_after(found[-1], cron=cron, interval_s=None,
                                         tz="Europe/Paris"))
    return found


def test_summer_time_changes_run_a_daily_job_once_and_an_hourly_one_every_hour() -> None:
    # Given Paris, where 2026-03-29 skips 02:00-03:00 and 2026-10-25 shows 02:00-03:00 twice
    utc = partial(datetime, tzinfo=UTC)
    # Then a job at 02:30 runs once each day: at 03:00 on the skipped hour, once in autumn
    assert walk("30 2 * * *", utc(2026, 3, 28, 12), 2) == [utc(2026, 3, 29, 1),
                                                          utc(2026, 3, 30, 0, 30)]
    assert walk("30 2 * * *", utc(2026, 10, 24, 12), 2) == [utc(2026, 10, 25, 0, 30),
                                                           utc(2026, 10, 26, 1, 30)]
    # And an hourly job runs every real hour through the repeated one
    assert walk("0 * * * *", utc(2026, 10, 24, 23, 30), 4) == [
        utc(2026, 10, 25, h) for h in range(4)]


@pytest.mark.parametrize("value", ["not cron", "61 * * * *", 0, 0.5, -3, True, float("nan")])
def test_bad_schedules_are_refused(value: object) -> None:
    with pytest.raises(ConfigurationError):
        periodic.parse_schedule(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(("cron", "interval_s", "tz"), [
    ("", None, "UTC"), ("* * * * *", 60.0, "UTC"), ("* * * * *", None, "Mars/Olympus"),
    ("", 0.1, "UTC"),
])
def test_check_timing_refuses_what_the_console_must_not_save(cron: str, interval_s: float | None,
                                                             tz: str) -> None:
    with pytest.raises(ConfigurationError):
        periodic.check_timing(cron=cron, interval_s=interval_s, tz=tz)


def test_schedule_values() -> None:
    periodic.check_timing(cron="*/5 * * * *", interval_s=None, tz="Europe/Paris")
    assert periodic.parse_schedule("*/5 * * * *") == ("*/5 * * * *", None)
    assert periodic.parse_schedule(timedelta(minutes=5)) == ("", 300.0)
    assert periodic.parse_schedule(10) == ("", 10.0)


# --- materialising -----------------------------------------------------------------------


def test_three_concurrent_materialisers_make_one_task_per_occurrence(
        transactional_db: None) -> None:
    # Given a schedule every second, and three consumers calling materialise_due at once
    lam = LambdaFactory()
    every_second(lam)
    steps = [T0 + seconds(0.1 * k) for k in range(101)]  # 10 s of controlled time
    barrier = threading.Barrier(3)
    errors: list[BaseException] = []

    def consumer() -> None:
        try:
            with closing_connections():
                for now in steps:
                    barrier.wait(timeout=30)
                    periodic.materialise_due(now=now)
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=consumer) for _ in range(3)]
    # When they run for 10 s of controlled time
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    # Then each occurrence became exactly one task
    assert not errors
    assert run_ats(lam) == [T0 + seconds(n) for n in range(11)]
    assert PeriodicTask.objects.get().next_run_at == T0 + seconds(11)


def test_lag_within_the_grace_period_loses_no_occurrence(db: None,
                                                         settings: Any) -> None:
    # Given a schedule every second whose consumer comes 3 s late (grace 10 s)
    settings.ATF_PERIODIC_GRACE_S = 10.0
    lam = LambdaFactory()
    every_second(lam)
    # When it materialises
    created = periodic.materialise_due(now=T0 + seconds(3.5))
    # Then every occurrence is there, each due at its own time
    assert created == 4
    assert run_ats(lam) == [T0 + seconds(n) for n in range(4)]


@pytest.mark.parametrize(("catch_up", "expected"), [("once", 1), ("skip", 0)])
def test_after_downtime_the_catch_up_policy_holds(db: None, settings: Any, catch_up: str,
                                                  expected: int) -> None:
    # Given a schedule every second that ran at T0, then 30 s with no consumer
    settings.ATF_PERIODIC_GRACE_S = 10.0
    lam = LambdaFactory()
    row = every_second(lam, catch_up=catch_up)
    assert periodic.materialise_due(now=T0 + seconds(0.5)) == 1
    back = T0 + seconds(30.5)
    # When a consumer comes back
    created = periodic.materialise_due(now=back)
    # Then the missed occurrences gave one task (once) or none (skip), not 30
    assert created == expected
    assert TaskEntity.objects.filter(lambda_ref=lam).count() == 1 + expected
    if expected:
        assert TaskEntity.objects.filter(lambda_ref=lam).latest("run_at").run_at == back
    # And the schedule goes on with the next future occurrence, one task each
    row.refresh_from_db()
    assert row.next_run_at == T0 + seconds(31)
    assert periodic.materialise_due(now=T0 + seconds(31.2)) == 1
    assert periodic.materialise_due(now=T0 + seconds(31.9)) == 0


def test_a_new_schedule_starts_at_its_next_occurrence(db: None) -> None:
    # Given a schedule created in the console without a next run
    lam = LambdaFactory()
    row = PeriodicTask.objects.create(name="nightly", lambda_ref=lam, cron="0 3 * * *",
                                      timezone="Europe/Paris", payload={"x": 1},
                                      collection="nightly", priority="low")
    # When the consumer first sees it, nothing runs yet
    assert periodic.materialise_due(now=T0) == 0
    row.refresh_from_db()
    assert row.next_run_at == datetime(2026, 1, 6, 2, 0, tzinfo=UTC)  # 03:00 in Paris
    # When that time comes, one task with the schedule's payload, collection and priority
    assert periodic.materialise_due(now=row.next_run_at + seconds(1)) == 1
    task = TaskEntity.objects.get(lambda_ref=lam)
    assert (task.payload, task.collection, task.priority) == ({"x": 1}, "nightly", "low")
    assert task.idempotency_key == "periodic:nightly:2026-01-06T02:00:00+00:00"


def test_disabled_schedules_make_nothing(db: None) -> None:
    lam = LambdaFactory()
    every_second(lam, enabled=False)
    assert periodic.materialise_due(now=T0 + seconds(5)) == 0
    assert not TaskEntity.objects.exists()


def test_a_broken_console_schedule_is_disabled_not_retried_forever(db: None) -> None:
    # Given a row with a cron expression the console did not check
    lam = LambdaFactory()
    row = PeriodicTask.objects.create(name="bad", lambda_ref=lam, cron="every tuesday",
                                      next_run_at=T0)
    # When it comes due
    assert periodic.materialise_due(now=T0 + seconds(1)) == 0
    # Then it is disabled, and says why
    row.refresh_from_db()
    assert row.enabled is False
    assert "disabled" in row.last_error


#: 2026-10-25 in Paris: at 01:00 UTC the clock goes back from 03:00 to 02:00.
PARIS_FALL_BACK = datetime(2026, 10, 25, 1, 0, tzinfo=UTC)


@pytest.mark.parametrize(("bad", "error"), [
    # an hourly macro through the repeated hour (cron.split()[1] on one field was an IndexError)
    ({"cron": "@hourly", "timezone": "Europe/Paris",
      "next_run_at": PARIS_FALL_BACK - seconds(3600)}, ""),
    # a row written around the checks, whose next occurrence overflows a datetime
    ({"interval_s": 1e300, "next_run_at": PARIS_FALL_BACK - seconds(3600)}, "OverflowError"),
])
def test_one_teams_bad_row_never_stops_the_pass_for_the_others(db: None, bad: dict[str, Any],
                                                                error: str) -> None:
    # Given team A's schedule that is due at the hour Paris clocks go back, and team B's
    a_lambda, b_lambda = LambdaFactory(), LambdaFactory()
    a_row = PeriodicTask.objects.create(name="a-hourly", lambda_ref=a_lambda, **bad)
    PeriodicTask.objects.create(name="b-tick", lambda_ref=b_lambda, interval_s=1.0,
                                next_run_at=PARIS_FALL_BACK - seconds(3600))
    # When the consumer's pass runs at that moment
    periodic.materialise_due(now=PARIS_FALL_BACK - seconds(3599.5))
    # Then team B's occurrence became a task
    assert run_ats(b_lambda) == [PARIS_FALL_BACK - seconds(3600)]
    # And team A's row either ran (the hourly macro) or is marked with its error and retried
    a_row.refresh_from_db()
    assert a_row.last_error.startswith(error)
    if not error:
        assert run_ats(a_lambda) == [PARIS_FALL_BACK - seconds(3600)]
        assert a_row.next_run_at == PARIS_FALL_BACK - seconds(3600) + seconds(3600)
    else:
        assert a_row.enabled and a_row.next_run_at == PARIS_FALL_BACK + seconds(
            periodic.RETRY_AFTER_ERROR_S - 3599.5)


def test_an_hourly_macro_runs_every_real_hour_through_a_paris_autumn_night(db: None) -> None:
    # Given "@hourly" in Paris, materialised each hour of the night the clock goes back
    lam = LambdaFactory()
    start = PARIS_FALL_BACK - seconds(3 * 3600)
    PeriodicTask.objects.create(name="hourly", lambda_ref=lam, cron="@hourly",
                                timezone="Europe/Paris", next_run_at=start)
    # When the consumer passes every hour of fake time for six hours
    for hour in range(6):
        periodic.materialise_due(now=start + seconds(hour * 3600 + 1))
    # Then there was one task for every real hour, the repeated one included
    assert run_ats(lam) == [start + seconds(hour * 3600) for hour in range(6)]


def test_one_team_with_many_due_schedules_does_not_fill_the_pass(db: None) -> None:
    # Given team A with more due schedules than one pass takes, all older than team B's one
    a_lambda, b_lambda = LambdaFactory(), LambdaFactory()
    PeriodicTask.objects.bulk_create(
        PeriodicTask(name=f"a-{n}", lambda_ref=a_lambda, team=a_lambda.team, interval_s=3600.0,
                     next_run_at=T0 - seconds(3600 + n)) for n in range(periodic.BATCH_SIZE + 50))
    PeriodicTask.objects.create(name="b-tick", lambda_ref=b_lambda, interval_s=1.0,
                                next_run_at=T0)
    # When one pass runs
    periodic.materialise_due(now=T0 + seconds(0.5))
    # Then team B's schedule was in it
    assert run_ats(b_lambda) == [T0]


def test_a_look_with_a_time_budget_takes_the_teams_in_turns(db: None) -> None:
    # Given team A's five due schedules, all older than team B's one
    a_lambda = LambdaFactory(team=TeamFactory(name="a"))
    b_lambda = LambdaFactory(team=TeamFactory(name="b"))
    PeriodicTask.objects.bulk_create(
        PeriodicTask(name=f"a-{n}", lambda_ref=a_lambda, team=a_lambda.team, interval_s=3600.0,
                     next_run_at=T0 - seconds(3600 + n)) for n in range(5))
    PeriodicTask.objects.create(name="b-tick", lambda_ref=b_lambda, team=b_lambda.team,
                                interval_s=3600.0, next_run_at=T0)
    # When the consumer looks twice with no time to spare: one schedule a look
    looks = [periodic.materialise_due(now=T0 + seconds(0.5), budget_s=0) for _ in range(2)]
    # Then each look made one task, one of team A's and team B's (A's five older ones did not
    # come first twice)
    assert looks == [1, 1]
    assert len(run_ats(a_lambda)) == 1
    assert run_ats(b_lambda) == [T0]


def test_a_look_ends_after_the_schedule_in_progress_when_cut(db: None) -> None:
    # Given five due schedules
    lam = LambdaFactory()
    PeriodicTask.objects.bulk_create(
        PeriodicTask(name=f"cut-{n}", lambda_ref=lam, team=lam.team, interval_s=3600.0,
                     next_run_at=T0 - seconds(n)) for n in range(5))
    # When a look is cut after its second schedule (the consumer: a wake-up came)
    asked = []
    now = T0 + seconds(0.5)
    periodic.materialise_due(now=now, cut=lambda: asked.append(1) or len(asked) >= 2)
    # Then two schedules were served, and the other three stay due for the next look
    def due() -> int:
        return PeriodicTask.objects.filter(next_run_at__lte=now).count()

    assert due() == 3
    periodic.materialise_due(now=now)
    assert due() == 0


# --- schedules defined in code -----------------------------------------------------------


@pytest.fixture
def code_schedules() -> Iterator[list[str]]:
    """Names of lambdas and schedules a test defines; forgotten afterwards."""
    names: list[str] = []
    yield names
    for name in names:
        registry.unregister(name)
        periodic.forget(name)


def test_register_with_a_schedule_creates_the_periodic_task(db: None,
                                                            code_schedules: list[str]) -> None:
    # Given a lambda registered with a cron schedule, and one defined with atf.every
    from tasks_core import atf

    code_schedules += ["tests.report", "hourly-report"]

    @atf.register("tests.report", schedule="*/5 * * * *")
    def report(ctx: atf.TaskContext, payload: Any) -> None:
        return None

    atf.every(timedelta(hours=1), "tests.report", {"scope": "all"}, name="hourly-report",
              catch_up="skip", priority="low")
    # When the consumer starts
    periodic.sync_code_schedules()
    # Then both rows exist, owned by the code
    rows = {row.name: row for row in PeriodicTask.objects.all()}
    assert rows["tests.report"].cron == "*/5 * * * *"
    assert rows["tests.report"].in_code is True
    assert rows["hourly-report"].interval_s == 3600.0
    assert (rows["hourly-report"].payload, rows["hourly-report"].catch_up,
            rows["hourly-report"].priority) == ({"scope": "all"}, "skip", "low")


def test_changed_and_removed_code_schedules(db: None, code_schedules: list[str]) -> None:
    # Given a synced code schedule that has run
    lam = LambdaFactory(name="tests.cleanup")
    code_schedules.append("cleanup")
    periodic.every(60, lam.name, name="cleanup")
    periodic.sync_code_schedules()
    PeriodicTask.objects.filter(name="cleanup").update(next_run_at=T0)
    # When its interval changes in code
    periodic.forget("cleanup")
    periodic.every(120, lam.name, name="cleanup")
    periodic.sync_code_schedules()
    # Then it starts again from the new timing
    row = PeriodicTask.objects.get(name="cleanup")
    assert (row.interval_s, row.next_run_at) == (120.0, None)
    # When it leaves the code, Then its row is disabled, not deleted
    periodic.forget("cleanup")
    periodic.sync_code_schedules()
    row.refresh_from_db()
    assert row.enabled is False


def test_consumers_starting_together_sync_without_conflict(transactional_db: None,
                                                           code_schedules: list[str]) -> None:
    # Given a schedule in code and no row yet
    lam = LambdaFactory(name="tests.sync")
    code_schedules.append("sync")
    periodic.every(60, lam.name, name="sync")
    # When four consumers start at the same moment
    race(*[periodic.sync_code_schedules] * 4)
    # Then none fails, and there is one row
    assert PeriodicTask.objects.filter(name="sync").count() == 1


def test_a_schedule_for_an_unknown_lambda_is_skipped(db: None,
                                                     code_schedules: list[str]) -> None:
    code_schedules.append("ghost")
    periodic.every(60, "tests.no_such_lambda", name="ghost")
    periodic.sync_code_schedules()
    assert not PeriodicTask.objects.filter(name="ghost").exists()


def test_duplicate_schedule_names_raise(code_schedules: list[str]) -> None:
    code_schedules.append("twice")
    periodic.every(60, "tests.x", name="twice")
    with pytest.raises(ConfigurationError):
        periodic.every(30, "tests.x", name="twice")


# --- end to end: real consumer processes -------------------------------------------------


@pytest.mark.slow
def test_three_running_consumers_make_one_task_per_second_and_catch_up(
        transactional_db: None, processes: Processes, redis_client: redis.Redis) -> None:
    # Given three schedules every second: a new one, and two whose consumers were down for
    # 30 s, one catching up `once` and one `skip`
    lambda_sync.sync_to_store()
    noop = Lambda.objects.get(name="demo.noop")
    down_since = periodic.next_after(timezone.now() - seconds(31), cron="", interval_s=1.0,
                                     tz="UTC")
    PeriodicTask.objects.create(name="tick", lambda_ref=noop, interval_s=1.0)
    for policy in ("once", "skip"):
        PeriodicTask.objects.create(name=f"tick-{policy}", lambda_ref=noop, interval_s=1.0,
                                    catch_up=policy, next_run_at=down_since)
    # When three consumers run at once for ten occurrences
    for _ in range(3):
        processes.start("runconsumer", "--poll-interval", "0.2",
                        env=subprocess_env(ATF_LOG_LEVEL="INFO"))
    wait_for(lambda: len(occurrences("tick")) >= 10, timeout_s=60, message="ten occurrences")
    processes.stop_all()
    # Then each schedule has one task per occurrence: one a second, none missing, none twice
    ticks, once, skip = occurrences("tick"), occurrences("tick-once"), occurrences("tick-skip")
    for found in (ticks, once[1:], skip):
        assert all(b - a == seconds(1) for a, b in zip(found, found[1:], strict=False)), found
    # And the 30 s of downtime gave one task under `once` (keyed by the first missed
    # occurrence), none under `skip`
    assert once[0] == down_since
    assert once[1] - once[0] > seconds(25)
    assert skip[0] - down_since > seconds(25)
    assert TaskEntity.objects.count() == len(ticks) + len(once) + len(skip)


def occurrences(name: str) -> list[datetime]:
    """The occurrences of the schedule `name` that have a task, oldest first."""
    prefix = f"periodic:{name}:"
    keys = TaskEntity.objects.filter(idempotency_key__startswith=prefix) \
        .values_list("idempotency_key", flat=True)
    return sorted(datetime.fromisoformat(key.removeprefix(prefix)) for key in keys)
