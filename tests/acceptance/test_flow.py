"""Flow control on a real fleet: consumers, direct and remote workers of several processes and
threads. Each limit is read back from what ran: `demo.record` appends each execution's start and
end, and no instant or window may hold more than the limit allows."""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from tasks_core import atf, directory, flow, scheduling
from tasks_core.access import EVERY_TEAM
from tasks_core.models import TaskEntity
from tasks_core.operations import set_options
from tests.acceptance.test_workers import FAST
from tests.conftest import Processes, subprocess_env, wait_for
from tests.remote import Workers

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.drill]

KEY = "demo:flow"
STARTED = "demo:flow:started"


@pytest.fixture
def env() -> dict[str, str]:
    return subprocess_env(**FAST)


@pytest.fixture
def records(redis_client: redis.Redis) -> Callable[[str], list[dict]]:
    def read(key: str = KEY) -> list[dict]:
        return [json.loads(line) for line in redis_client.lrange(key, 0, -1)]

    return read


def limit(**options: object) -> None:
    set_options(EVERY_TEAM, "demo.record", options, by="test")
    directory.clear()


def schedule(count: int, seconds: float, keys: list[str] | None = None) -> list[TaskEntity]:
    return scheduling.schedule_many([
        {"lambda": "demo.record", "payload": {"key": KEY, "started_key": STARTED,
                                              "seconds": seconds},
         "limit_key": None if keys is None else keys[n % len(keys)]}
        for n in range(count)])


def succeeded(count: int) -> bool:
    return TaskEntity.objects.filter(status="success").count() >= count


def most_at_once(lines: list[dict]) -> int:
    """The most executions running at one instant (an end before a start at the same time)."""
    events = sorted([(line["start"], 1) for line in lines] + [(line["end"], -1) for line in lines],
                    key=lambda event: (event[0], event[1]))
    running = most = 0
    for _moment, step in events:
        running += step
        most = max(most, running)
    return most


def most_in_window(starts: list[float], seconds: float) -> int:
    """The most starts in any window of `seconds` (sliding: one window from each start)."""
    starts = sorted(starts)
    most = left = 0
    for right, moment in enumerate(starts):
        while moment - starts[left] >= seconds:
            left += 1
        most = max(most, right - left + 1)
    return most


#: The fleets every limit must hold across: one consumer and four worker processes of eight
#: threads; or two consumers, a direct worker and a remote one (through the API) beside it.
FLEETS = ["processes", "mixed"]


def start_fleet(kind: str, processes: Processes, env: dict[str, str]) -> None:
    """Start the fleet of `kind` (FLEETS) and wait until its workers serve: on a loaded machine
    the API's start can take seconds, and tasks due before it would all go to the direct
    worker."""
    if kind == "processes":
        processes.start("runconsumer", env=env)
        workers = [processes.start("runworker", "demo.record", "--processes", "4",
                                   "--threads", "8", env=env)]
    else:
        processes.start("runconsumer", env=env)
        processes.start("runconsumer", env=env)
        workers = [Workers("direct", processes, env).start("demo.record", "--threads", "8"),
                   Workers("remote", processes, env).start("demo.record", "--threads", "8")]
    wait_for(lambda: all("started: 8 thread(s)" in Path(worker.log_path).read_text()  # type: ignore[attr-defined]
                         for worker in workers), timeout_s=60, message="the workers to start")


@pytest.mark.parametrize("fleet", FLEETS)
def test_concurrency_holds_across_the_fleet_and_the_held_tasks_follow_at_once(
        fleet: str, processes: Processes, env: dict[str, str],
        records: Callable[..., list[dict]]) -> None:
    # Given concurrency 3 and a fleet of many more executors
    concurrency, tasks, seconds = 3, 90, 0.2
    limit(concurrency=concurrency)
    start_fleet(fleet, processes, env)
    # When 90 tasks of 0.2 s come due
    schedule(tasks, seconds)
    wait_for(lambda: succeeded(tasks), timeout_s=120, message=f"{tasks} tasks done")
    # Then never more than 3 ran at once, and 3 did: the limit binds, it does not serialize
    lines = records()
    assert len(lines) == tasks
    assert most_at_once(lines) == concurrency
    # ...and the held tasks followed each finish without a poll's delay (a held task's recheck
    # is flow.HOLD_RECHECK_S, 30 s): the run took about 90 × 0.2 / 3 = 6 s of work
    work = tasks * seconds / concurrency
    span = max(line["end"] for line in lines) - min(line["start"] for line in lines)
    assert work <= span < 2 * work, span
    if fleet == "mixed":  # both kinds of worker took tasks
        assert len({line["pid"] for line in lines}) >= 2


@pytest.mark.parametrize("fleet", FLEETS)
def test_a_rate_holds_in_every_one_second_window(
        fleet: str, processes: Processes, env: dict[str, str]) -> None:
    # Given 20 starts a second and idle workers waiting
    rate, tasks = 20, 120
    limit(rate=f"{rate}/s")
    start_fleet(fleet, processes, env)
    # When 120 tasks come due at once
    schedule(tasks, 0)
    wait_for(lambda: succeeded(tasks), timeout_s=120, message=f"{tasks} tasks done")
    # Then no one-second window holds more than 20 starts (a sliding window: exact), and the
    # 120 took at least the 5 s the rate allows (six windows, the first at the first start)
    # (the starts the store recorded, the limit's own clock)
    starts = [moment.timestamp() for moment in
              TaskEntity.objects.values_list("started_at", flat=True)]
    assert len(starts) == tasks
    assert most_in_window(starts, 1.0) <= rate
    assert max(starts) - min(starts) >= tasks / rate - 1


@pytest.mark.parametrize("fleet", FLEETS)
def test_a_key_concurrency_holds_each_key_and_the_keys_run_side_by_side(
        fleet: str, processes: Processes, env: dict[str, str],
        records: Callable[..., list[dict]]) -> None:
    # Given one running task per key
    limit(key_concurrency=1)
    start_fleet(fleet, processes, env)
    # When 50 tasks of 0.2 s over 5 keys come due
    tasks = schedule(50, 0.2, keys=["a", "b", "c", "d", "e"])
    key_of = {task.pk: task.limit_key for task in tasks}
    wait_for(lambda: succeeded(50), timeout_s=60, message="50 tasks done")
    lines = records()
    by_key: dict[str, list[dict]] = defaultdict(list)
    for line in lines:
        by_key[key_of[line["task_id"]]].append(line)
    # Then no key ever ran two at once, while the five keys ran side by side (no head-of-line
    # block: one key's held tasks never kept another's from starting)
    assert {key: most_at_once(runs) for key, runs in by_key.items()} == dict.fromkeys("abcde", 1)
    assert most_at_once(lines) == 5


@pytest.mark.parametrize("kind", ["direct", "remote"])
@pytest.mark.parametrize("option", ["concurrency", "key_concurrency"])
def test_a_killed_workers_slot_comes_back_only_when_its_lease_lapses(
        option: str, kind: str, processes: Processes, env: dict[str, str],
        records: Callable[..., list[dict]]) -> None:
    # Given one slot (of the lambda, or of one limit key), a long task of one attempt holding
    # it on a worker (direct, or remote through the API), and another task waiting for it
    limit(**{option: 1})
    key = "merchant-42" if option == "key_concurrency" else None
    long = atf.schedule("demo.record", {"key": KEY, "started_key": STARTED, "seconds": 60},
                        max_attempts=1, limit_key=key)
    processes.start("runconsumer", env=env)
    workers = Workers(kind, processes, env)
    worker = workers.start("demo.record", "--threads", "2")
    wait_for(lambda: len(records(STARTED)) == 1, timeout_s=30, message="the long task started")
    short = scheduling.schedule_many([{"lambda": "demo.record",
                                       "payload": {"key": KEY, "started_key": STARTED,
                                                   "seconds": 0},
                                       "limit_key": key}])[0]
    workers.start("demo.record", "--threads", "2")
    # When the worker running it is killed
    os.kill(worker.pid, signal.SIGKILL)
    killed = time.time()
    # Then nothing starts until the killed task's lease lapses (heartbeat timeout 5 s, the last
    # heartbeat at most 1 s before the kill); then the consumer ends it `dead` (its last
    # attempt) and that frees its slot at once: the waiting task runs, long before the held
    # tasks' recheck
    wait_for(lambda: TaskEntity.objects.get(pk=short.pk).status == "success", timeout_s=30,
             message="the waiting task done")
    (later,) = [line["start"] for line in records(STARTED)[1:]]
    assert killed + 3.5 <= later < killed + 5 + flow.HOLD_RECHECK_S / 3, later - killed
    assert TaskEntity.objects.get(pk=long.pk).status == "dead"


@pytest.mark.serial  # it times the run: 2 to 4 s after the last schedule (4.7 s beside others)
def test_debounce_runs_the_last_payload_once_after_the_last_schedule(
        processes: Processes, env: dict[str, str], records: Callable[..., list[dict]]) -> None:
    # Given a consumer and a worker
    processes.start("runconsumer", env=env)
    processes.start("runworker", "demo.record", "--threads", "2", env=env)
    # When one key is scheduled 10 times within a second, with debounce 2 s
    ids = set()
    for n in range(10):
        ids.add(atf.schedule("demo.record", {"key": KEY, "seconds": 0, "n": n},
                             debounce=2, debounce_key="report").pk)
        last = time.time()
        time.sleep(0.1)
    # Then one task ran, once, with the last payload, about 2 s after the last schedule
    (task_id,) = ids
    wait_for(lambda: TaskEntity.objects.get(pk=task_id).status == "success", timeout_s=30,
             message="the debounced task done")
    (line,) = records()
    assert line["task_id"] == task_id
    assert TaskEntity.objects.get(pk=task_id).payload["n"] == 9
    assert 2 <= line["start"] - last < 4
    assert Counter(TaskEntity.objects.values_list("status", flat=True)) == {"success": 1}
