"""Periodic occurrences over years of fake time: every cron form, in every time zone.

Properties, not examples: hypothesis draws a cron expression (one-field macros, five or six
fields, the 29th to the 31st, the last day of a month), a time zone from the whole tz database
and a start between 1971 and 2080, then walks the schedule's occurrences.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo, available_timezones

import pytest
from croniter import croniter
from hypothesis import given, settings
from hypothesis import strategies as st

from tasks_core import periodic
from tasks_core.exceptions import ConfigurationError

ZONES = sorted(available_timezones())
#: Zones with summer time, drawn more often: that is where the calendar bites.
SUMMER_TIME_ZONES = ["Europe/Paris", "America/New_York", "Australia/Lord_Howe",
                     "America/Santiago", "Pacific/Apia", "Europe/London", "Asia/Tehran"]
MACROS = ["@hourly", "@daily", "@midnight", "@weekly", "@monthly", "@yearly", "@annually"]

zones = st.one_of(st.sampled_from(SUMMER_TIME_ZONES), st.sampled_from(ZONES))
any_time = st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2080, 1, 1),
                        timezones=st.just(UTC))


def clock_changes(zone: ZoneInfo, year: int) -> list[datetime]:
    """Midnights (UTC) of the days in `year` on which the zone's UTC offset changes."""
    days = [datetime(year, 1, 1, tzinfo=UTC) + timedelta(days=n) for n in range(367)]
    return [a for a, b in zip(days, days[1:], strict=False)
            if a.astimezone(zone).utcoffset() != b.astimezone(zone).utcoffset()]


@st.composite
def starts(draw: st.DrawFn, tz: str) -> datetime:
    """A start anywhere in 1971-2080, or (more often) in the two days before a clock change."""
    moment = draw(any_time)
    changes = clock_changes(ZoneInfo(tz), moment.year)
    if not changes or draw(st.integers(0, 3)) == 0:
        return moment
    before = timedelta(minutes=draw(st.integers(0, 2 * 24 * 60)))
    return draw(st.sampled_from(changes)) - before


def _field(low: int, high: int) -> st.SearchStrategy[str]:
    value = st.integers(low, high)
    return st.one_of(
        st.just("*"), value.map(str), st.integers(2, max(2, high // 2)).map(lambda k: f"*/{k}"),
        st.tuples(value, value).map(lambda ab: f"{min(ab)}-{max(ab)}"),
        st.lists(value, min_size=2, max_size=3, unique=True).map(
            lambda vs: ",".join(map(str, sorted(vs)))),
    )


day_of_month = st.one_of(_field(1, 31), st.integers(29, 31).map(str), st.just("L"))
five_fields = st.tuples(_field(0, 59), _field(0, 23), day_of_month, _field(1, 12),
                        _field(0, 6)).map(" ".join)
six_fields = st.tuples(five_fields, st.sampled_from(["0", "30", "*/20"])).map(" ".join)
crons = st.one_of(st.sampled_from(MACROS), five_fields, six_fields)


def walk(cron: str, tz: str, start: datetime, count: int) -> list[datetime]:
    """The first `count` occurrences after `start`, each found from the one before."""
    found: list[datetime] = []
    after = start
    for _ in range(count):
        after = periodic.next_after(after, cron=cron, interval_s=None, tz=tz)
        found.append(after)
    return found


def clock_changed_before(moment: datetime, zone: ZoneInfo) -> bool:
    """Whether the zone's UTC offset changed in the day before `moment` (a skipped hour or day
    moves an occurrence to the first instant after it)."""
    return moment.astimezone(zone).utcoffset() != (moment - timedelta(days=1)).astimezone(
        zone).utcoffset()


@settings(max_examples=300, deadline=None)
@given(cron=crons, tz=zones, data=st.data())
def test_every_saved_schedule_walks_forward_on_its_own_times(cron: str, tz: str,
                                                             data: st.DataObject) -> None:
    # Given any expression that saving accepts (never-due ones are refused there)
    try:
        periodic.parse_schedule(cron)
    except ConfigurationError:
        return
    zone = ZoneInfo(tz)
    start = data.draw(starts(tz))
    # When its occurrences are walked one after the other
    found = walk(cron, tz, start, 12)
    # Then each is later than the one before: the consumer always moves on
    assert all(a < b for a, b in zip([start, *found], found, strict=False))
    # And each falls on a time the expression names, on the zone's clock (unless a clock change
    # skipped that time: then it runs at the first instant after)
    for moment in found:
        assert croniter.match(cron, moment.astimezone(zone)) or clock_changed_before(moment, zone)


def intended_day(run: datetime, cron: str, zone: ZoneInfo) -> date:
    """The local day an occurrence belongs to. A run moved by a skipped time (it does not fall
    on a time the expression names) belongs to the day of the skipped wall-clock time, which
    may be the day before (a change at midnight, or a whole day skipped as in Apia in 2011)."""
    local = run.astimezone(zone).replace(tzinfo=None)  # the wall clock, with no zone rules
    if croniter.match(cron, local):
        return local.date()
    wall_before = (run - timedelta(microseconds=1)).astimezone(zone).replace(tzinfo=None)
    return croniter(cron, wall_before).get_next(datetime).date()


@settings(max_examples=200, deadline=None)
@given(minute=st.integers(0, 59), hour=st.integers(0, 23), tz=zones, data=st.data())
def test_a_daily_job_runs_once_for_every_local_day(minute: int, hour: int, tz: str,
                                                   data: st.DataObject) -> None:
    # Given a job at a fixed time of day
    zone, cron = ZoneInfo(tz), f"{minute} {hour} * * *"
    start = data.draw(starts(tz))
    # When 40 days of occurrences are walked (through any clock change in them)
    days = [intended_day(moment, cron, zone) for moment in walk(cron, tz, start, 40)]
    # Then no local day has two runs (a repeated hour), and none is left out: a skipped time
    # runs at the first instant after it, for its own day
    assert len(set(days)) == len(days)
    assert days == [days[0] + timedelta(days=n) for n in range(len(days))]


@pytest.mark.parametrize(("tz", "cron", "start", "runs"), [
    # Nuuk's clock jumped from 23:00 to midnight on 30 March 2024: that day's 23:30 ran at
    # the first instant after, 00:00 on the 31st, and the 31st's own at 23:30
    ("America/Nuuk", "30 23 * * *", datetime(2024, 3, 29, 12, tzinfo=UTC),
     ["2024-03-29T23:30:00-02:00", "2024-03-31T00:00:00-01:00", "2024-03-31T23:30:00-01:00"]),
    # Samoa skipped 30 December 2011 whole: its 05:30 ran at the first instant after
    ("Pacific/Apia", "30 5 * * *", datetime(2011, 12, 29, tzinfo=UTC),
     ["2011-12-29T05:30:00-10:00", "2011-12-31T00:00:00+14:00", "2011-12-31T05:30:00+14:00"]),
])
def test_a_time_a_clock_change_skipped_runs_at_the_first_instant_after(
        tz: str, cron: str, start: datetime, runs: list[str]) -> None:
    found = walk(cron, tz, start, len(runs))
    assert [moment.astimezone(ZoneInfo(tz)).isoformat() for moment in found] == runs


@settings(max_examples=200, deadline=None)
@given(cron=st.sampled_from(["@hourly", "0 * * * *", "15 * * * *", "0 * * * * 0"]),
       tz=zones, data=st.data())
def test_an_hourly_job_runs_every_real_hour(cron: str, tz: str, data: st.DataObject) -> None:
    # Given a job whose hour is "*", in a zone whose clock goes back or forward
    start = data.draw(starts(tz))
    # When two days of occurrences are walked
    found = walk(cron, tz, start, 48)
    # Then it never waits more than an hour and a half of real time (an hour, plus a
    # half-hour clock change as on Lord Howe Island), the repeated hour included
    assert max(b - a for a, b in zip(found, found[1:], strict=False)) <= timedelta(minutes=90)


@pytest.mark.parametrize("cron", ["0 0 30 2 *", "0 0 31 4 *", "0 0 31 2,4,6,9,11 *",
                                  "0 12 30,31 2 * 0"])
def test_never_due_expressions_are_refused_at_save(cron: str) -> None:
    with pytest.raises(ConfigurationError, match="never due"):
        periodic.parse_schedule(cron)


@pytest.mark.parametrize("cron", ["0 0 29 2 *", "0 0 31 * *", "0 0 L 2 *", "@hourly",
                                  "@yearly", "*/10 * * * * 30"])
def test_rare_and_short_forms_are_accepted(cron: str) -> None:
    assert periodic.parse_schedule(cron) == (cron, None)
