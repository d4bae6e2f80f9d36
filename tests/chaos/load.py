"""The task mix and the thread that schedules it: in process (schedule_many) or through the API.

Most tasks are `demo.record` (which leaves one record per execution for the overlap check) in
several collections, priorities and delays; a few are `demo.fail` tasks that fail (retriable)
or kill their worker process (crash) on their first attempts and then succeed. A small share
goes to the current "victim" collection, which the collection-drop fault drops.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import requests
from django.db import DatabaseError

from tasks_core.exceptions import InvalidTask
from workers import db

logger = logging.getLogger(__name__)

#: The Redis list demo.record appends to.
RECORDS_KEY = "demo:chaos:records"
#: Each task's idempotency key is this and its number: which acknowledged schedule vanished.
KEY_PREFIX = "chaos-"
#: Attempts every chaos task may take: the faults, not the attempt limit, are under test.
MAX_ATTEMPTS = 20
#: Collections of ordinary demo.record tasks.
COLLECTIONS = ("alpha", "beta", "gamma", "delta")
PRIORITIES = ("high", "default", "low")
#: Share of tasks that go to the current victim collection.
VICTIM_SHARE = 0.03
#: Share of demo.fail retriable tasks.
RETRIABLE_SHARE = 0.04
#: Share of tasks scheduled with a delay, and the longest delay in seconds.
DELAYED_SHARE = 0.2
MAX_DELAY_S = 8.0


class Victims:
    """The collection the next drop fault drops; new victim tasks go to it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._index = 0
        self.dropped: list[str] = []

    @property
    def current(self) -> str:
        with self._lock:
            return f"victim-{self._index}"

    def advance(self) -> str:
        """The collection to drop now; later victim tasks go to the next one."""
        with self._lock:
            name = f"victim-{self._index}"
            self.dropped.append(name)
            self._index += 1
            return name


@dataclass(frozen=True, kw_only=True)
class Mix:
    """How long demo.record tasks sleep: most up to `seconds`, a tenth up to six times that."""

    seconds: float
    crash_every: int  #: one demo.fail crash task per this many tasks


def make_call(index: int, rng: random.Random, mix: Mix, victims: Victims) -> dict[str, Any]:
    """The schedule_many call of task number `index`."""
    call: dict[str, Any] = {
        "lambda": "demo.record",
        "priority": rng.choice(PRIORITIES),
        "collection": rng.choice(COLLECTIONS),
        "max_attempts": MAX_ATTEMPTS,
        "idempotency_key": f"{KEY_PREFIX}{index}",
    }
    longest = 6 * mix.seconds if rng.random() < 0.1 else mix.seconds
    seconds = rng.uniform(0, longest)
    call["payload"] = {"key": RECORDS_KEY, "seconds": round(seconds, 3)}
    draw = rng.random()
    if index % mix.crash_every == mix.crash_every // 2:
        call.update({"lambda": "demo.fail", "payload": {"mode": "crash", "times": 1}})
    elif draw < RETRIABLE_SHARE:
        call.update({"lambda": "demo.fail",
                     "payload": {"mode": "retriable", "times": rng.randint(1, 2)}})
    elif draw < RETRIABLE_SHARE + VICTIM_SHARE:
        call["collection"] = victims.current
    if rng.random() < DELAYED_SHARE:
        call["delay"] = round(rng.uniform(0.2, MAX_DELAY_S), 2)
    return call


class Loader(threading.Thread):
    """Schedules `total` tasks in batches at `rate` tasks per second.

    While more than `max_backlog` tasks are unfinished it waits, so that a machine slower than
    the rate gets a longer run instead of queues longer than the enqueue timeout.

    A share of the batches goes through the REST API when it answers; a batch the API did not
    take is scheduled in process instead, and the idempotency keys keep that from doubling it.
    """

    def __init__(self, *, total: int, rate: float, batch: int, rng: random.Random, mix: Mix,
                 victims: Victims, api: ApiClient | None, api_share: float,
                 backlog: Callable[[], int], max_backlog: int) -> None:
        super().__init__(name="Loader", daemon=True)
        self.total, self.rate, self.batch = total, rate, batch
        self.rng, self.mix, self.victims = rng, mix, victims
        self.api, self.api_share = api, api_share
        self.backlog, self.max_backlog = backlog, max_backlog
        self.throttled_s = 0.0
        self.scheduled = 0
        self.through_api = 0
        self.api_failures = 0
        self.started_s = 0.0
        self.running = True

    def run(self) -> None:
        self.started_s = due_s = time.monotonic()
        while self.running and self.scheduled < self.total:
            self._wait_for_backlog()
            size = min(self.batch, self.total - self.scheduled)
            calls = [make_call(self.scheduled + i, self.rng, self.mix, self.victims)
                     for i in range(size)]
            self._schedule(calls)
            self.scheduled += size
            # Pace from the later of the plan and now: a throttled loader does not burst after.
            due_s = max(due_s, time.monotonic() - size / self.rate) + size / self.rate
            time.sleep(max(0.0, due_s - time.monotonic()))

    def _wait_for_backlog(self) -> None:
        waited_s = time.monotonic()
        while self.running and self._backlog() > self.max_backlog:
            time.sleep(0.5)
        self.throttled_s += time.monotonic() - waited_s

    def _backlog(self) -> int:
        try:
            return self.backlog()
        except DatabaseError:
            db.reset_connection()
            return self.max_backlog + 1

    def _schedule(self, calls: list[dict[str, Any]]) -> None:
        if self.api is not None and self.rng.random() < self.api_share:
            if self.api.schedule(calls):
                self.through_api += len(calls)
                return
            self.api_failures += 1
        schedule_in_process(calls)

    def stop(self) -> None:
        self.running = False


def schedule_in_process(calls: list[dict[str, Any]], attempts: int = 30) -> None:
    """schedule_many, retried while the database is being cut or its backends terminated."""
    from tasks_core import scheduling  # the CLI imports this module before Django is set up

    for attempt in range(1, attempts + 1):
        try:
            scheduling.schedule_many(calls)
            return
        except InvalidTask:
            raise
        except DatabaseError as exc:
            logger.info("scheduling failed (attempt %d), retrying: %s", attempt, exc)
            db.reset_connection()
            time.sleep(0.2)
    raise RuntimeError(f"could not schedule a batch in {attempts} attempts")


class ApiClient:
    """The REST API of the cluster, with a token of the demo team."""

    def __init__(self, base_url: str, token: str) -> None:
        self.base_url = base_url
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Token {token}"

    def schedule(self, calls: list[dict[str, Any]]) -> bool:
        """POST a batch; True if the API created it."""
        try:
            response = self.session.post(f"{self.base_url}/api/v1/tasks/batch/",
                                         json={"tasks": calls}, timeout=30)
        except requests.RequestException as exc:
            logger.info("API batch failed: %s", exc)
            return False
        if response.status_code not in (200, 201):
            logger.info("API batch answered %s: %.300s", response.status_code, response.text)
            return False
        return True

    def answers(self) -> bool:
        """Whether the batch endpoint exists and takes an empty batch or says why not."""
        try:
            response = self.session.post(f"{self.base_url}/api/v1/tasks/batch/",
                                         json={"tasks": []}, timeout=10)
        except requests.RequestException:
            return False
        return response.status_code in (200, 201, 400)
