"""A team's scheduling rate: tasks a second it may schedule through the API, all servers together.

`ATF_API_SCHEDULE_RATE_PER_TEAM` counts tasks, not requests (a batch of 1,000 is 1,000), so a
team sending batches back to back cannot take the store's and the consumer's time from the
others; `ATF_API_THROTTLE_RATE` counts requests per token, and a batch is one. The count is a
sliding window in the cache, shared by every server process (two fixed windows, the last
weighted by how much of it still overlaps the sliding one): each window holds two full
batches' worth (`ATF_MAX_BATCH_SIZE`) or one second's, whichever is longer, so a full batch is
never refused for being a batch. A request counts before it is validated (refusing it then
costs little), and a request over the rate is refused whole, counts nothing, and is answered
`429` naming the setting with `Retry-After: <seconds until it would fit>`. An
unreachable cache lets requests through, as the request throttle does.

A token counts against its own team. A session, or a full token filed under no team, counts
against every team its user is a member of (`budgets`): otherwise one member could schedule at
the team's rate with a token and at as much again signed in.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from typing import Any

from django.core.cache import cache
from rest_framework.exceptions import Throttled
from rest_framework.request import Request

from tasks_api.models import ApiToken
from tasks_api.window_count import count_in_window
from tasks_core import access
from tasks_core.conf import atf_settings

logger = logging.getLogger(__name__)

SETTING = "ATF_API_SCHEDULE_RATE_PER_TEAM"


class ScheduleRateExceeded(Throttled):
    """429: the caller's team scheduled as many tasks as its rate allows for now."""

    default_code = "schedule_rate_exceeded"

    def __init__(self, rate: int, wait_s: float) -> None:
        super().__init__(wait=wait_s, detail=(
            f"Your team is scheduling tasks too fast: {SETTING} allows {rate} tasks a second "
            f"(each task of a batch counts)."))
        self.setting = SETTING


def window_limit(rate: int) -> int:
    """Tasks one window holds: two full batches, or one second's worth at `rate` if more."""
    return max(rate, 2 * atf_settings.max_batch_size)


def windows_until_fits(*, tasks: int, limit: int, previous: int, current: int,
                       elapsed: float) -> float:
    """Windows from now until `tasks` more fit under `limit`, the previous window holding
    `previous`, the current one `current`, `elapsed` (0..1) of the current window gone: the
    previous window's weight falls to 0 over the current one, then the current one's over the
    next."""
    if current + tasks <= limit:
        room = limit - current - tasks
        return max(0.0, 1 - room / previous - elapsed) if previous else 0.0
    # Not in this window: in the next, `current` is the previous window's count.
    return 1 - elapsed + max(0.0, 1 - (limit - tasks) / max(1, current))


def tasks_in_batch(body: Any) -> int:
    """The tasks a batch request asks for, counted before it is validated (a refusal then costs
    no validation); a body that is no batch counts one."""
    tasks = body.get("tasks") if isinstance(body, dict) else None
    return min(len(tasks), atf_settings.max_batch_size) if isinstance(tasks, list) else 1


class _EndedWindows:
    """The counts of windows that have ended (they no longer change), read from the cache once
    per window, team and process, so that a request costs one round trip."""

    def __init__(self) -> None:
        self._window = -1
        self._counts: dict[str, int] = {}

    def count(self, key: str, window: int) -> int:
        if window != self._window:  # a new window: the last one's reads are of no more use
            self._window, self._counts = window, {}
        counts = self._counts
        if key not in counts:
            counts[key] = int(cache.get(key) or 0)
        return counts[key]


_ended_windows = _EndedWindows()


def budgets(request: Request) -> list[str]:
    """The keys whose rates the caller's tasks count against: a token's own team; for a
    session or a token filed under no team, every team its user is a member of (so that one
    member's token and session share their team's budget), or the user when in none."""
    auth = request.auth
    if isinstance(auth, ApiToken) and auth.team_id is not None:
        return [f"team-{auth.team_id}"]
    user = request.user
    team_ids = access.Scope.of(user).team_ids
    if team_ids is None:  # sees every team: its memberships, read here
        team_ids = frozenset(user.atf_teams.values_list("pk", flat=True))  # type: ignore[union-attr]
    return [f"team-{pk}" for pk in sorted(team_ids)] or [f"user-{user.pk}"]


def _over(key: str, tasks: int, limit: int, window: int, elapsed: float,
          timeout_s: int) -> tuple[str, int, int] | None:
    """Count `tasks` in `key`'s current window; (its window key, its count, the previous
    window's) when that puts it over `limit`, else None (the cache could not count: let it
    through)."""
    current_key = key + str(window)
    current = count_in_window(current_key, tasks, timeout_s=timeout_s)
    if current is None:
        return None
    previous = _ended_windows.count(key + str(window - 1), window)
    if previous * (1 - elapsed) + current <= limit:
        return None
    return current_key, current, previous


def take(request: Request, tasks: int, *, now: float | None = None) -> None:
    """Count `tasks` against the rate of each of the caller's budgets (`budgets`), or raise
    ScheduleRateExceeded (and count nothing). `now` (a Unix time) is the clock's, unless a test
    gives one."""
    rate = atf_settings.api_schedule_rate_per_team
    if not rate:
        return
    limit = window_limit(rate)
    span_s = limit / rate
    window, elapsed = divmod((time.time() if now is None else now) / span_s, 1)
    timeout_s = math.ceil(2 * span_s) + 1
    keys = [f"{atf_settings.queue_prefix}:schedule-rate:{budget}:{span_s:g}:"
            for budget in budgets(request)]
    counted = [(key + str(int(window)), _over(key, tasks, limit, int(window), elapsed,
                                              timeout_s)) for key in keys]
    refusals = [over for _key, over in counted if over is not None]
    if not refusals:
        return
    for current_key, _over_it in counted:
        with contextlib.suppress(ValueError):  # the key vanished: nothing to give back
            cache.decr(current_key, tasks)
    wait = max(windows_until_fits(tasks=tasks, limit=limit, previous=previous,
                                  current=current - tasks, elapsed=elapsed)
               for _key, current, previous in refusals) * span_s
    logger.info("refused: %d tasks for %s over its scheduling rate", tasks, request.user,
                extra={"action": "schedule_rate_exceeded", "setting": SETTING})
    raise ScheduleRateExceeded(rate, max(1.0, math.ceil(wait)))
