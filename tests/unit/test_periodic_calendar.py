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


@settings(max_examples=200, deadline=None)
@given(minute=st.integers(0, 59), hour=st.integers(0, 23), tz=zones, data=st.data())
def test_a_daily_job_runs_once_on_every_local_day(minute: int, hour: int, tz: str,
                                                  data: st.DataObject) -> None:
    # Given a job at a fixed time of day
    zone = ZoneInfo(tz)
    start = data.draw(starts(tz))
    # When 40 days of occurrences are walked (through any clock change in them)
    days = [moment.astimezone(zone).date() for moment in walk(f"{minute} {hour} * * *", tz,
                                                              start, 40)]
    # Then no local day has two runs (a repeated hour), and none is left out (a skipped hour),
    # except a calendar day the zone skipped whole (Pacific/Apia, 2011-12-30)
    assert len(set(days)) == len(days)
    missing = {days[0] + timedelta(days=n) for n in range((days[-1] - days[0]).days)} - set(days)
    assert missing <= {date(2011, 12, 30)}


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
