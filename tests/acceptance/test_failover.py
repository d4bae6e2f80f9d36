"""A PostgreSQL failover under load: the standby promoted, the primary fenced, nobody told.

Every process (this test's own, the consumer, the API, direct and remote workers) names both
nodes in one DATABASE_URL with target_session_attrs=read-write and must find the new primary by
itself. The fault is the worst case for replication: the link between primary and standby
breaks for PARTITION_S under load (as a network partition would), then the primary dies
(fenced: `pg_ctl stop -m immediate`) and the standby is promoted.

- Synchronous replication: the primary's commits wait out the partition and die with it, so no
  schedule that was acknowledged is gone: lost 0, overlapping 0, and the fleet finishes tasks
  at its earlier rate again within FULL_SPEED_S of the fault's start.
- Asynchronous replication: what the primary acknowledged during the partition never reached
  the standby. The test finds each such schedule (its id gone, or taken by another task) and
  reports how many, out of how many acknowledged.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import redis
from django.conf import settings
from django.db import Error, connection

from atf_project import database_url
from tasks_core import scheduling
from tasks_core.models import TaskEntity
from tests.acceptance.test_workers import FAST, overlapping
from tests.chaos.recovery import time_to_full_speed
from tests.conftest import Processes, routed_database, subprocess_env, wait_for
from tests.remote import Workers
from tests.replication import ReplicatedPostgres
from workers import db

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.drill]

RECORDS = "demo:records"
#: Tasks scheduled per second (in batches of BATCH), each a demo.record of TASK_S.
RATE, BATCH, TASK_S = 40, 4, 0.02
#: Seconds the replication link is down before the primary dies.
PARTITION_S = 1.0
#: Seconds of load on the new primary before the load stops.
AFTER_S = 8.0
#: The stated bound: from the fault's start to the fleet's earlier rate again (seconds).
FULL_SPEED_S = 20.0


class Load(threading.Thread):
    """Schedules RATE tasks a second and keeps what was acknowledged: task id -> serial number
    (the payload's `n`, by which a task that vanished is told from one that took its id)."""

    def __init__(self) -> None:
        super().__init__(name="FailoverLoad", daemon=True)
        self.acknowledged: dict[int, int] = {}
        self.acknowledged_at: list[float] = []
        self.failures = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        serial, next_at = 0, time.monotonic()
        try:
            while not self.stopping.is_set():
                batch = [{"lambda": "demo.record",
                          "payload": {"key": RECORDS, "seconds": TASK_S, "n": serial + i}}
                         for i in range(BATCH)]
                try:
                    tasks = scheduling.schedule_many(batch)
                except Error:  # the primary is gone: this batch was not acknowledged
                    self.failures += 1
                    db.reset_connection()
                    time.sleep(0.1)
                    continue
                for index, task in enumerate(tasks):
                    self.acknowledged[task.pk] = serial + index
                    self.acknowledged_at.append(time.time())
                serial += BATCH
                next_at += BATCH / RATE
                time.sleep(max(0.0, next_at - time.monotonic()))
        finally:
            connection.close()

    def since(self, moment: float) -> int:
        return sum(1 for at in self.acknowledged_at if at >= moment)


@dataclass
class Outcome:
    acknowledged: int
    vanished: list[int]  #: acknowledged task ids whose task is gone after the failover
    overlapping: list[int]
    full_speed_s: float | None
    failover_s: float
    reruns: int  #: executions of the surviving tasks beyond one each


@pytest.fixture
def pair(request: pytest.FixtureRequest, transactional_db: None
         ) -> Iterator[ReplicatedPostgres]:
    """A primary and a standby with a copy of the test database; this process's connections
    (and, through subprocess_env, its children's) name both, for read-write."""
    replicated = ReplicatedPostgres(synchronous=request.param == "synchronous")
    database = settings.DATABASES["default"]
    try:
        replicated.copy_database("atf", host=database["HOST"], port=int(database["PORT"]),
                                 dbname=database["NAME"])
        both = database_url.parse(replicated.url("atf"))
        with routed_database(HOST=both["HOST"], PORT=both["PORT"], NAME=both["NAME"],
                             OPTIONS={**database["OPTIONS"], **both["OPTIONS"]}):
            yield replicated
    finally:
        replicated.stop()


def fail_over_under_load(pair: ReplicatedPostgres, processes: Processes,
                         redis_client: redis.Redis) -> Outcome:
    """Start the fleet, load it, break replication, fail over, let it settle; what happened."""
    env = subprocess_env(**FAST)
    processes.start("runconsumer", env=env)
    direct = Workers("direct", processes, env)
    remote = Workers("remote", processes, env)
    for workers in (direct, direct, remote):
        workers.start("demo.record", "--threads", "4")
    load = Load()
    load.start()
    try:
        wait_for(lambda: TaskEntity.objects.filter(status="success").count() >= 5 * RATE,
                 timeout_s=60, message="five seconds' worth of tasks done before the fault")
        started = time.time()
        pair.detach_standby()
        time.sleep(PARTITION_S)  # the partition's length: what async replication misses
        failover = pair.failover()
        ended = time.time()
        db.reset_connection()  # this thread's connection went with the old primary
        wait_for(lambda: load.since(ended) >= AFTER_S * RATE, timeout_s=60,
                 message="schedules acknowledged by the new primary")
    finally:
        load.stopping.set()
        load.join(30)
    rows = dict(TaskEntity.objects.values_list("pk", "payload__n"))
    wait_for(lambda: TaskEntity.objects.filter(status="success").count() == len(rows),
             timeout_s=120, message=f"all {len(rows)} tasks to succeed")
    vanished = sorted(pk for pk, n in load.acknowledged.items() if rows.get(pk) != n)
    executions = [execution for line in redis_client.lrange(RECORDS, 0, -1)
                  if (execution := json.loads(line))["task_id"] not in vanished]
    finished = TaskEntity.objects.values_list("finished_at", flat=True)
    return Outcome(
        acknowledged=len(load.acknowledged), vanished=vanished,
        overlapping=overlapping(executions),
        full_speed_s=time_to_full_speed([at.timestamp() for at in finished], started=started,
                                        ended=ended),
        failover_s=failover.total_s,
        reruns=len(executions) - len({execution["task_id"] for execution in executions}))


@pytest.fixture
def outcome(pair: ReplicatedPostgres, processes: Processes, redis_client: redis.Redis,
            capsys: pytest.CaptureFixture[str]) -> Outcome:
    """The failover under load, its figures printed (never silently, whatever is asserted)."""
    result = fail_over_under_load(pair, processes, redis_client)
    full_speed = ("never" if result.full_speed_s is None
                  else f"{result.full_speed_s:.1f}s after the fault began")
    with capsys.disabled():
        print(  # noqa: T201 - the measured figures
            f"\n{'synchronous' if pair.synchronous else 'asynchronous'} failover (partition "
            f"{PARTITION_S}s, fence + promote {result.failover_s:.2f}s): "
            f"{len(result.vanished)} of {result.acknowledged} acknowledged schedules vanished "
            f"{result.vanished[:10]}, {result.reruns} rerun(s), {len(result.overlapping)} "
            f"overlapping; full speed {full_speed}")
    return result


@pytest.mark.parametrize("pair", ["synchronous"], indirect=True)
def test_a_failover_with_synchronous_replication_loses_nothing_and_recovers(
        outcome: Outcome) -> None:
    assert outcome.vanished == []
    assert outcome.overlapping == []
    assert outcome.full_speed_s is not None and outcome.full_speed_s < FULL_SPEED_S


@pytest.mark.parametrize("pair", ["asynchronous"], indirect=True)
def test_a_failover_with_asynchronous_replication_reports_what_it_lost(
        outcome: Outcome) -> None:
    # The partition's acknowledged schedules are gone, and the fixture listed them
    assert 0 < len(outcome.vanished) <= (PARTITION_S + outcome.failover_s + 1) * RATE
    # The fleet came back as with synchronous replication
    assert outcome.full_speed_s is not None and outcome.full_speed_s < FULL_SPEED_S
