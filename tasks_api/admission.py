"""Fair admission: which requests of one server process run at once, shared among teams.

The fair shares (tasks_api.fair_share) bound what one team holds of a process's threads, a
quarter of them. But a quarter of 32 threads is still 8 requests sharing the process's
processor (one interpreter lock) with another team's one: that request then answers 9 times
slower, and waits behind them for a database connection of the pool. Here at most
`ATF_API_ACTIVE_REQUESTS` requests run at once; the others wait, in one queue per team:

- one team runs at most half of them (at least one), so another team's first requests find
  one free at once, not after one of the flood's requests ends;
- while another team is active (a request running, waiting, or ended within `HALF_LIFE_S`)
  and kept the process less busy lately (its requests' processor time, decaying likewise; then
  the requests it runs), a team runs at most `ATF_API_ACTIVE_REQUESTS_PER_BUSY_TEAM` (1): the
  process's one interpreter lock is shared by the requests that run, so the lighter team's
  request shares it with that many of the busier team's, not with half the turns;
- a freed one goes to the waiting team that runs the fewest, then to the one whose requests
  took the least time lately (their seconds, decaying by half every `HALF_LIFE_S`), so a team
  of long requests (batches, large reads) waits before a team of short ones;
- within a team, first come first served.

A claim waiting for a task gives its place back while it waits (`paused`): it takes no
processor time.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter, deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from tasks_core import conf

#: Seconds after which a team's past request time counts half.
HALF_LIFE_S = 1.0


@dataclass
class _Turn:
    """A waiting request's: set when it may run, from `since`."""

    admitted: threading.Event = field(default_factory=threading.Event)
    since: float = 0.0


@dataclass
class _Team:
    running: int = 0
    started: float = 0.0  #: sum of the start times of its running requests
    used_s: float = 0.0  #: seconds its finished requests took, decayed to `at`
    cpu_s: float = 0.0  #: processor seconds its finished requests' threads used, likewise
    at: float = 0.0
    waiting: deque[_Turn] = field(default_factory=deque)

    def decayed(self, seconds: float, now: float) -> float:
        return seconds * math.pow(0.5, (now - self.at) / HALF_LIFE_S)

    def finished_s(self, now: float) -> float:
        """The time its finished requests took, decayed to `now`."""
        return self.decayed(self.used_s, now)

    def load(self, now: float) -> tuple[float, int]:
        """How busy it keeps the process: its finished requests' processor time, decayed
        (their time alone would count the waits that the others' requests cause), then the
        requests it runs."""
        return self.decayed(self.cpu_s, now), self.running

    def active(self, now: float) -> bool:
        """Whether it runs or waits, or its last request ended within HALF_LIFE_S."""
        return bool(self.running or self.waiting) or now - self.at < HALF_LIFE_S

    def recent_s(self, now: float) -> float:
        """Its request time lately: the finished, decayed, and the running so far."""
        return self.finished_s(now) + self.running * now - self.started


class Admission:
    """The requests of one process that run at once, and the queues of those that wait."""

    def __init__(self, slots: int | None = None, busy: int | None = None) -> None:
        self._slots = slots  #: None: ATF_API_ACTIVE_REQUESTS, read at each admission
        self._busy = busy  #: None: ATF_API_ACTIVE_REQUESTS_PER_BUSY_TEAM, likewise
        self._lock = threading.Lock()
        self._teams: dict[str, _Team] = {}
        self._thread_cpu = threading.local()  #: a turn's thread_time() at its start
        self.admitted: Counter[str] = Counter()  #: requests admitted so far, per team

    @property
    def slots(self) -> int:
        return self._slots if self._slots is not None else int(
            conf.value("ATF_API_ACTIVE_REQUESTS"))

    @property
    def busy(self) -> int:
        return self._busy if self._busy is not None else int(
            conf.value("ATF_API_ACTIVE_REQUESTS_PER_BUSY_TEAM"))

    def _running(self) -> int:
        return sum(team.running for team in self._teams.values())

    def _limit(self, team: _Team, slots: int, now: float) -> int:
        """The requests `team` may run at once: half the turns, or `busy` while another
        active team kept the process less busy lately (`_Team.load`)."""
        half = max(1, slots // 2)
        busy = self.busy
        if not busy or busy >= half:
            return half
        load = team.load(now)
        lighter = any(other is not team and other.active(now) and other.load(now) < load
                      for other in self._teams.values())
        return busy if lighter else half

    def _may_run(self, team: _Team, slots: int, now: float) -> bool:
        return self._running() < slots and team.running < self._limit(team, slots, now)

    def _start(self, key: str, team: _Team, now: float) -> None:
        team.running += 1
        team.started += now
        self.admitted[key] += 1

    def enter(self, key: str) -> float:
        """Wait until team `key`'s request may run; the monotonic time it started."""
        slots = self.slots
        now = time.monotonic()
        with self._lock:
            team = self._teams.setdefault(key, _Team(at=now))
            if not slots or (not team.waiting and self._may_run(team, slots, now)):
                self._start(key, team, now)
                self._thread_cpu.at = time.thread_time()
                return now
            turn = _Turn()
            team.waiting.append(turn)
        turn.admitted.wait()
        self._thread_cpu.at = time.thread_time()
        return turn.since

    def leave(self, key: str, since: float) -> None:
        """Team `key`'s request that started at `since`, on this thread, ends: its place goes
        to the next."""
        now = time.monotonic()
        cpu_s = time.thread_time() - self._thread_cpu.at
        with self._lock:
            team = self._teams[key]
            team.used_s, team.cpu_s, team.at = (team.finished_s(now) + now - since,
                                                team.decayed(team.cpu_s, now) + cpu_s, now)
            team.running -= 1
            team.started -= since
            self._admit_waiting(now)
            if not team.running and not team.waiting and team.used_s < 0.001:
                del self._teams[key]

    def _admit_waiting(self, now: float) -> None:
        slots = self.slots
        while True:
            ready = [(team.running, team.recent_s(now), key) for key, team in self._teams.items()
                     if team.waiting and (not slots or self._may_run(team, slots, now))]
            if not ready:
                return
            *_, key = min(ready)
            team = self._teams[key]
            self._start(key, team, now)
            turn = team.waiting.popleft()
            turn.since = now
            turn.admitted.set()

    def running(self, key: str) -> int:
        """Requests of team `key` running now."""
        with self._lock:
            team = self._teams.get(key)
            return team.running if team else 0

    def waiting(self, key: str) -> int:
        """Requests of team `key` waiting for their turn."""
        with self._lock:
            team = self._teams.get(key)
            return len(team.waiting) if team else 0

    @contextmanager
    def turn(self, key: str) -> Iterator[None]:
        """Team `key`'s turn to run, from when it comes until the block ends."""
        since = self.enter(key)
        try:
            yield
        finally:
            self.leave(key, since)


#: The requests of this server process.
requests = Admission()
