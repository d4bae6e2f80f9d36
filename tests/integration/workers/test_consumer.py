"""The store consumer against real PostgreSQL and Redis, one pass at a time with a set clock."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
import redis
from django.db import connection, transaction
from django.utils import timezone

from tasks_core import atf, attempt_history, directory, outcomes, queues, scheduling, store, wakeup
from tasks_core.access import EVERY_TEAM
from tasks_core.conf import atf_settings
from tasks_core.models import Collection, FlowStart, Lambda, TaskEntity
from tasks_core.operations import set_options
from tasks_core.states import TaskStatus
from tests.conftest import ROOT, closing_connections, subprocess_env, wait_for
from tests.factories import LambdaFactory, TaskFactory, TeamFactory
from workers import compiled_query, testing, turns
from workers.consumer import SLICE_ROWS, Consumer, PassSummary, _lambda_gates_query

pytestmark = [pytest.mark.django_db]


class Clock:
    def __init__(self) -> None:
        self.now = timezone.now() + timedelta(seconds=1)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)

    def catch_up(self) -> None:
        """At the real time, if that is later: every task scheduled until now is due (a
        test that schedules for longer than the second of slack, as on a loaded machine)."""
        self.now = max(self.now, timezone.now())


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def consumer(queue: queues.QueueBackend, clock: Clock) -> Consumer:
    return Consumer(batch_size=500, poll_interval_s=0.1, queue=queue, clock=clock)


def drain(queue: queues.QueueBackend, lambda_name: str) -> list[tuple[str, int]]:
    """Every message of a lambda's queues as (priority, task id), highest priority first."""
    names = [queue.queue_name(lambda_name, p) for p in ("high", "default", "low")]
    found = []
    while popped := queue.pop(names, max_count=100, wait_s=0):
        found += [(item.queue.rsplit(":", 1)[1], item.message.task_id) for item in popped]
    return found


def test_tasks_reach_their_priority_queue_in_priority_order(consumer: Consumer,
                                                            queue: queues.QueueBackend) -> None:
    low = atf.schedule("demo.noop", priority="low")
    default = atf.schedule("demo.noop")
    high = atf.schedule("demo.noop", priority="high")
    summary = consumer.run_pass()
    assert summary.enqueued == 3
    assert drain(queue, "demo.noop") == [("high", high.pk), ("default", default.pk),
                                         ("low", low.pk)]


def test_a_delayed_task_is_enqueued_no_earlier_than_its_run_at(
        consumer: Consumer, queue: queues.QueueBackend, clock: Clock) -> None:
    task = atf.schedule("demo.noop", run_at=clock.now + timedelta(seconds=30))
    clock.advance(29.9)
    assert consumer.run_pass().enqueued == 0
    clock.advance(0.2)
    assert consumer.run_pass().enqueued == 1
    assert drain(queue, "demo.noop") == [("default", task.pk)]


@pytest.mark.parametrize("lost_at", ["enqueued", "claimed", "processing"])
def test_a_task_lost_anywhere_is_enqueued_again_after_its_timeout_once(
        lost_at: str, consumer: Consumer, queue: queues.QueueBackend, clock: Clock,
        redis_client: redis.Redis, settings: object) -> None:
    # Given a task the consumer enqueued
    settings.ATF_ENQUEUE_TIMEOUT_S = 10
    settings.ATF_CLAIM_TIMEOUT_S = 10
    task = atf.schedule("demo.noop")
    consumer.run_pass()
    # ...lost at `lost_at`: Redis flushed, or the controller/executor gone after claim/start
    popped = queue.pop([queue.queue_name("demo.noop", "default")], max_count=1, wait_s=0)
    if lost_at == "enqueued":
        redis_client.flushdb()
    else:
        lambda_id = Lambda.objects.get(name="demo.noop").pk
        (claimed,) = store.claim([popped[0].message], worker="w", lambda_ids=[lambda_id],
                                 now=clock.now)
        if lost_at == "processing":
            assert store.start(claimed, now=clock.now)
    timeout_s = 30 if lost_at == "processing" else 10  # demo lambdas: heartbeat_timeout 30
    # When its timeout has not passed, nothing is enqueued
    clock.advance(timeout_s - 1)
    assert consumer.run_pass().total == 0
    # When it passes, the task is enqueued again, exactly once
    clock.advance(2)
    summary = consumer.run_pass()
    assert summary.reenqueued == {lost_at: 1}
    assert consumer.run_pass().total == 0
    assert drain(queue, "demo.noop") == [("default", task.pk)]


@pytest.mark.django_db(transaction=True)
@pytest.mark.pooled
@pytest.mark.parametrize("consumers", [2, 3])
def test_several_consumers_enqueue_each_task_exactly_once(
        consumers: int, redis_client: redis.Redis, database_route: str) -> None:
    # Given a backlog of 20,000 due tasks
    for _ in range(20):
        scheduling.schedule_many([{"lambda": "demo.noop"}] * 1000)
    later = timezone.now() + timedelta(seconds=1)
    pushed: Counter[int] = Counter()

    # When several consumers run passes over it at the same time
    def run() -> None:
        queue = queues.backend()
        consumer = Consumer(batch_size=500, poll_interval_s=0.1, queue=queue,
                            clock=lambda: later)
        try:
            with closing_connections():
                while consumer.run_pass().total:
                    pass
        finally:
            queue.close()

    threads = [threading.Thread(target=run) for _ in range(consumers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    queue = queues.backend()
    for _priority, task_id in drain(queue, "demo.noop"):
        pushed[task_id] += 1
    # Then every task was pushed once, and all are enqueued with lease 1
    assert len(pushed) == 20_000
    assert set(pushed.values()) == {1}
    assert set(TaskEntity.objects.values_list("status", "lease").distinct()) == {("enqueued", 1)}
    # And no consumer's turn outlived it (behind a transaction-mode pooler, a session lock did)
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database"
                       " WHERE l.locktype = 'advisory' AND l.classid = %s"
                       " AND d.datname = current_database()", [turns.LOCK_NAMESPACE])
        assert cursor.fetchone() == (0,)


def test_a_paused_lambda_delivers_nothing_until_resumed(
        consumer: Consumer, queue: queues.QueueBackend) -> None:
    tasks = [atf.schedule("demo.noop") for _ in range(5)]
    scheduling.set_gate("demo.noop", "paused")
    assert consumer.run_pass().total == 0
    assert set(TaskEntity.objects.values_list("status", flat=True)) == {"new"}
    scheduling.set_gate("demo.noop", "open")
    assert consumer.run_pass().enqueued == 5
    assert sorted(task_id for _p, task_id in drain(queue, "demo.noop")) == [t.pk for t in tasks]


def test_a_dropped_lambda_marks_its_due_tasks_dropped(consumer: Consumer) -> None:
    atf.schedule("demo.noop")
    atf.schedule("demo.noop")
    later = atf.schedule("demo.noop", delay=3600)
    scheduling.set_gate("demo.noop", "dropped")
    assert consumer.run_pass().dropped == 2
    assert Counter(TaskEntity.objects.values_list("status", flat=True)) == {"dropped": 2,
                                                                            "new": 1}
    assert TaskEntity.objects.get(pk=later.pk).status == "new"


def test_a_collection_gate_leaves_the_lambdas_other_collections_flowing(
        consumer: Consumer, queue: queues.QueueBackend) -> None:
    marketing = atf.schedule("demo.noop", collection="marketing")
    reset = atf.schedule("demo.noop", collection="password_reset")
    scheduling.set_gate("demo.noop", "paused", collection="marketing")
    assert consumer.run_pass().enqueued == 1
    assert drain(queue, "demo.noop") == [("default", reset.pk)]
    scheduling.set_gate("demo.noop", "dropped", collection="marketing")
    assert consumer.run_pass().dropped == 1
    assert TaskEntity.objects.get(pk=marketing.pk).status == "dropped"


def test_a_gate_with_until_reopens_by_itself(consumer: Consumer, clock: Clock,
                                             queue: queues.QueueBackend) -> None:
    task = atf.schedule("demo.noop")
    scheduling.set_gate("demo.noop", "paused", until=clock.now + timedelta(seconds=60))
    assert consumer.run_pass().total == 0
    clock.advance(61)
    consumer.housekeep(clock.now)
    assert Lambda.objects.get(name="demo.noop").gate == "open"
    assert consumer.run_pass().enqueued == 1
    assert drain(queue, "demo.noop") == [("default", task.pk)]


def test_housekeeping_reopens_collections_and_marks_vanished_workers(
        consumer: Consumer, clock: Clock, settings: object) -> None:
    from tasks_core.models import Worker

    scheduling.set_gate("demo.noop", "dropped", collection="c",
                        until=clock.now - timedelta(seconds=1))
    Worker.objects.create(worker_id="h:1", host="h", pid=1, started_at=clock.now,
                          last_seen=clock.now - timedelta(seconds=atf_settings.worker_stale_s + 1))
    Worker.objects.create(worker_id="h:2", host="h", pid=2, started_at=clock.now,
                          last_seen=clock.now)
    consumer.housekeep(clock.now)
    assert Collection.objects.get(name="c").gate == "open"
    assert list(Worker.objects.filter(stopped_at__isnull=False).values_list("worker_id",
                                                                            flat=True)) == ["h:1"]


def test_one_housekeeping_round_folds_outcomes_and_prunes_more_than_a_batch(
        consumer: Consumer, clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given more tasks past the retention than three prune batches, and one that finished now
    from tasks_core import stats
    from tasks_core.models import OutcomeTotal

    monkeypatch.setattr("workers.consumer.PRUNE_BATCH_SIZE", 5)
    # (and time for all four batches: the round's 0.3 s ran out after three beside other tests)
    monkeypatch.setattr("tasks_core.retention.PRUNE_BUDGET_S", 30.0)
    lam = LambdaFactory()
    old = clock.now - timedelta(seconds=atf_settings.retention_s + 60)
    for _ in range(17):
        TaskFactory(lambda_ref=lam, status="success", finished_at=old)
    TaskFactory(lambda_ref=lam, status="success", finished_at=clock.now)
    # When the consumer housekeeps once
    consumer.housekeep(clock.now)
    # Then every old task is counted in the rollup and gone, and the counts still show them
    assert TaskEntity.objects.filter(lambda_ref=lam).count() == 1
    assert OutcomeTotal.objects.get(lambda_ref=lam).finished == 17
    assert stats.status_counts(lambda_ids=[lam.pk])["success"] == 18


def test_housekeeping_prunes_the_starts_of_rate_limited_keys_that_never_start_again(
        consumer: Consumer, clock: Clock) -> None:
    # Given a lambda allowing one start a second per key, and starts of 400 keys made two
    # hours ago (a claim prunes a key's log only when that key starts again)
    set_options(EVERY_TEAM, "demo.noop", {"key_rate": "1/s"}, by="test")
    directory.clear()
    lam = Lambda.objects.get(name="demo.noop")
    FlowStart.objects.bulk_create([
        FlowStart(lambda_ref=lam, key=f"merchant-{n}", at=timezone.now() - timedelta(hours=2))
        for n in range(400)])
    # When the consumer housekeeps, Then none of them is left
    consumer.housekeep(clock.now)
    assert not FlowStart.objects.exists()


def test_a_lambda_with_a_huge_backlog_does_not_delay_another(queue: queues.QueueBackend,
                                                             clock: Clock) -> None:
    # Given lambda A with 50,000 due tasks and a quota, and lambda B with 10
    a, b = LambdaFactory(name="tests.a", quota_per_s=1000), LambdaFactory(name="tests.b")
    for _ in range(10):
        store.create([store.NewTask(lambda_id=a.pk, collection="default", priority="default",
                                    payload={}, run_at=clock.now, max_attempts=3)] * 5000,
                     now=clock.now)
    b_tasks = store.create([store.NewTask(lambda_id=b.pk, collection="default",
                                          priority="default", payload={}, run_at=clock.now,
                                          max_attempts=3)] * 10, now=clock.now)
    consumer = Consumer(batch_size=500, poll_interval_s=0.1, queue=queue, clock=clock)
    # When the consumer makes two passes
    first, second = consumer.run_pass(), consumer.run_pass()
    # Then all of B's tasks are enqueued, and A got no more than its share and quota
    statuses = Counter(TaskEntity.objects.filter(lambda_ref=b).values_list("status", flat=True))
    assert statuses == {"enqueued": len(b_tasks)}
    a_enqueued = TaskEntity.objects.filter(lambda_ref=a, status="enqueued").count()
    assert a_enqueued <= 1000
    assert first.busy
    assert first.enqueued + second.enqueued == a_enqueued + 10


def test_a_team_with_many_busy_lambdas_takes_no_more_of_a_pass_than_a_team_with_one(
        queue: queues.QueueBackend, clock: Clock) -> None:
    # Given team A with nine lambdas and team B with one, each with 100 due tasks
    team_a, team_b = TeamFactory(name="many"), TeamFactory(name="one")
    lambdas = [LambdaFactory(name=f"tests.many{n}", team=team_a) for n in range(9)]
    lambdas.append(LambdaFactory(name="tests.one", team=team_b))
    for lam in lambdas:
        store.create([store.NewTask(lambda_id=lam.pk, collection="default",
                                    priority="default", payload={}, run_at=clock.now,
                                    max_attempts=3)] * 100, now=clock.now)
    consumer = Consumer(batch_size=100, poll_interval_s=0.1, queue=queue, clock=clock)
    # When one pass of 100 runs
    consumer.run_pass()
    # Then team B got half of it (it got a tenth when lambdas, not teams, shared a pass)
    enqueued = Counter(TaskEntity.objects.filter(status="enqueued").values_list(
        "lambda_ref__team__name", flat=True))
    assert enqueued == {"one": 50, "many": 9 * 5}


def due_tasks(lam: Lambda, count: int, now: datetime) -> None:
    store.create([store.NewTask(lambda_id=lam.pk, collection="default", priority="default",
                                payload={}, run_at=now, max_attempts=3)] * count, now=now)


class WokenAfterFirstPush(Consumer):
    """A consumer to which a wake-up comes as soon as it pushed its first messages, as one
    would from a task scheduled while a pass is under way."""

    def _push(self, lambda_name: str, messages: list, now: datetime) -> int:
        failed = super()._push(lambda_name, messages, now)
        self.wake.set()
        return failed


def test_a_wake_up_cuts_a_shared_pass_after_the_slice_in_progress(
        queue: queues.QueueBackend, clock: Clock) -> None:
    # Given team A's lambda with 400 due tasks and team B's with one, both seen by a pass
    lam_a = LambdaFactory(name="tests.backlog", team=TeamFactory(name="backlog"))
    lam_b = LambdaFactory(name="tests.light", team=TeamFactory(name="light"))
    due_tasks(lam_a, 400, clock.now)
    due_tasks(lam_b, 1, clock.now)
    consumer = WokenAfterFirstPush(batch_size=500, poll_interval_s=0.1, queue=queue,
                                   clock=clock)
    first = consumer.run_pass()
    # When team B's next task comes due and a pass runs, a wake-up arriving during it
    due_tasks(lam_b, 1, clock.now)
    second = consumer.run_pass()
    # Then each pass enqueued team B's task and one slice of team A's backlog, and said it
    # left work behind (the next pass starts at once)
    assert (first.enqueued, second.enqueued) == (1 + SLICE_ROWS, 1 + SLICE_ROWS)
    assert first.busy and second.busy
    assert TaskEntity.objects.filter(lambda_ref=lam_b, status="enqueued").count() == 2


class WokenWhileReadingGates(Consumer):
    """A consumer to which a wake-up comes just after it read the lambdas' gates, as one
    would from a task scheduled then (for a lambda the pass may already have left out)."""

    def _gates(self, now: datetime) -> list:
        gates = super()._gates(now)
        self.wake.set()
        return gates


def test_a_wake_up_during_a_pass_is_kept_for_the_next(
        queue: queues.QueueBackend, clock: Clock) -> None:
    # Given a lambda with a due task, and a wake-up that comes while a pass reads the gates
    due_tasks(LambdaFactory(name="tests.woken", team=TeamFactory(name="woken")), 1, clock.now)
    consumer = WokenWhileReadingGates(batch_size=500, poll_interval_s=30, queue=queue,
                                      clock=clock)
    # When the pass ends
    assert consumer.run_pass().enqueued == 1
    # Then the wake-up is still there: the consumer does not sleep before its next pass
    assert consumer.wake.is_set()


def test_one_teams_pass_is_not_sliced(queue: queues.QueueBackend, clock: Clock) -> None:
    # Given one team's lambda with 400 due tasks, and wake-ups coming all the time
    due_tasks(LambdaFactory(name="tests.alone", team=TeamFactory(name="alone")), 400, clock.now)
    consumer = WokenAfterFirstPush(batch_size=500, poll_interval_s=0.1, queue=queue,
                                   clock=clock)
    # Then one pass enqueues them all
    assert consumer.run_pass().enqueued == 400


def test_the_only_lambda_with_due_rows_gets_the_whole_batch(queue: queues.QueueBackend,
                                                             clock: Clock) -> None:
    # Given several registered lambdas, of which only one has due rows
    assert Lambda.objects.count() > 1
    lam = LambdaFactory(name="tests.busy")
    store.create([store.NewTask(lambda_id=lam.pk, collection="default", priority="default",
                                payload={}, run_at=clock.now, max_attempts=3)] * 700,
                 now=clock.now)
    consumer = Consumer(batch_size=500, poll_interval_s=0.1, queue=queue, clock=clock)
    # Then one pass enqueues a whole batch of it, not a share split with idle lambdas
    assert consumer.run_pass().enqueued == 500


def test_the_consumer_sleeps_until_the_next_trigger_not_a_whole_poll(
        queue: queues.QueueBackend, clock: Clock) -> None:
    consumer = Consumer(batch_size=500, poll_interval_s=5.0, queue=queue, clock=clock)
    atf.schedule("demo.noop", run_at=clock.now + timedelta(seconds=2))
    atf.schedule("demo.record", {"key": "r"}, run_at=clock.now + timedelta(seconds=3),
                 priority="high")
    idle = consumer.run_pass()
    assert consumer.seconds_to_sleep(idle) == pytest.approx(2.0)
    # The soonest of every lambda and priority
    atf.schedule("demo.record", {"key": "r"}, run_at=clock.now + timedelta(seconds=1.5),
                 priority="low")
    assert consumer.seconds_to_sleep(idle) == pytest.approx(1.5)
    # A task that fell due after the pass began (while it ran) is taken at once
    atf.schedule("demo.noop", run_at=clock.now + timedelta(milliseconds=1))
    clock.advance(0.002)
    assert consumer.seconds_to_sleep(idle) <= 0
    assert consumer.run_pass().enqueued == 1
    # A due task the pass left behind (its collection is paused) waits for the poll
    atf.schedule("demo.noop", collection="held")
    scheduling.set_gate("demo.noop", "paused", collection="held")
    held = consumer.run_pass()
    assert held.enqueued == 0
    assert consumer.seconds_to_sleep(held) == 5.0


def test_a_quota_limits_how_fast_a_lambda_is_enqueued(queue: queues.QueueBackend,
                                                      clock: Clock) -> None:
    lam = LambdaFactory(name="tests.slow", quota_per_s=50)
    store.create([store.NewTask(lambda_id=lam.pk, collection="default", priority="default",
                                payload={}, run_at=clock.now, max_attempts=3)] * 300,
                 now=clock.now)
    consumer = Consumer(batch_size=500, poll_interval_s=0.1, queue=queue, clock=clock)
    # Within one second it gets one second's worth, however often it polls
    assert sum(consumer.run_pass().enqueued for _ in range(5)) == 50
    clock.advance(0.5)
    assert sum(consumer.run_pass().enqueued for _ in range(5)) == 25


@pytest.mark.django_db(transaction=True)
def test_a_committed_schedule_wakes_the_consumer(redis_client: redis.Redis) -> None:
    event = threading.Event()
    listener = wakeup.Listener(event)
    listener.start()
    try:
        wait_for(lambda: redis_client.pubsub_numsub(wakeup.channel())[0][1] >= 1,
                 message="the listener to subscribe")
        with transaction.atomic():
            atf.schedule("demo.noop")
            assert not event.wait(0.2), "woken before the commit"
        assert event.wait(5), "no wake-up after the commit"
    finally:
        listener.stop()


@pytest.fixture
def wakeup_subscriber(redis_client: redis.Redis) -> Iterator[redis.client.PubSub]:
    """A subscriber of the wake-ups of a store without shards, subscribed when the test begins."""
    subscriber = redis_client.pubsub(ignore_subscribe_messages=True)
    subscriber.subscribe(wakeup.channel())
    try:
        wait_for(lambda: redis_client.pubsub_numsub(wakeup.channel())[0][1] >= 1,
                 message="the subscription")
        yield subscriber
    finally:
        subscriber.close()


def _published(subscriber: redis.client.PubSub, seconds: float) -> list[bytes]:
    """The wake-ups `subscriber` receives within `seconds`."""
    received = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if (message := subscriber.get_message(timeout=0.1)) is not None:
            received.append(message["data"])
    return received


@pytest.mark.django_db(transaction=True)
def test_a_transaction_of_many_schedules_publishes_after_its_commit_and_fewer_than_its_tasks(
        wakeup_subscriber: redis.client.PubSub) -> None:
    with transaction.atomic():
        for _ in range(5):
            atf.schedule("demo.noop")
        atf.schedule_many([{"lambda": "demo.noop"}] * 3)
        assert _published(wakeup_subscriber, 0.3) == [], "published before the commit"
    assert 1 <= len(_published(wakeup_subscriber, 1.0)) < 6


def test_wake_ups_asked_for_at_once_are_sent_as_one_or_a_few(
        wakeup_subscriber: redis.client.PubSub) -> None:
    for _ in range(200):
        wakeup.notify()
    received = _published(wakeup_subscriber, 1.0)  # long enough for every wake-up to arrive
    # The first publish may leave before the other 199 are asked for; they then share one.
    assert 1 <= len(received) < 20


def test_wake_ups_asked_for_in_a_stream_are_sent_one_a_pause_and_the_last_is_not_lost(
        wakeup_subscriber: redis.client.PubSub) -> None:
    began = time.monotonic()
    for _ in range(50):  # a task a millisecond, as a busy producer schedules them
        wakeup.notify()
        time.sleep(0.001)
    asked_s = time.monotonic() - began
    received = _published(wakeup_subscriber, 0.5)
    assert 2 <= len(received) <= asked_s / wakeup.PAUSE_S + 2
    # One asked for during the pause after a publish is sent when the pause ends.
    wakeup.notify()
    assert wakeup_subscriber.get_message(timeout=1.0) is not None
    wakeup.notify()  # within the pause: the publish above left well under PAUSE_S ago
    assert len(_published(wakeup_subscriber, 0.2)) == 1


@pytest.fixture
def closed_port() -> Iterator[int]:
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    yield sock.getsockname()[1]
    sock.close()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"ATF_QUEUE_BACKEND": "carrier-pigeon"}, "atf.E001: unknown ATF_QUEUE_BACKEND"),
        ({"ATF_HEARTBEAT_INTERVAL_S": "20"},
         "atf.E003: ATF_HEARTBEAT_TIMEOUT_S: heartbeat timeout"),
        ({"REDIS_URL": "redis://127.0.0.1:{port}/0"}, "Connection refused"),
        *(({"DATABASE_URL": "postgres://postgres@127.0.0.1:{port}/test",
            "ATF_DB_PREPARED_STATEMENTS": prepared}, "cannot reach the database")
          # Prepared statements bring in the session check (atf.E009), which connects on 6.x.
          for prepared in ("False", "True")),
    ],
)
def test_bad_configuration_stops_the_commands_with_one_line(
        variables: dict[str, str], message: str, closed_port: int) -> None:
    env = subprocess_env(**{name: value.format(port=closed_port)
                            for name, value in variables.items()})
    for command in ("runconsumer", "runworker"):
        done = subprocess.run([sys.executable, "manage.py", command], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode != 0
        assert message in done.stderr
        assert "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_bad_flags_are_refused() -> None:
    for args in (["runconsumer", "--batch-size", "0"], ["runconsumer", "--poll-interval", "x"],
                 ["runworker", "--threads", "-1"], ["runworker", "no.such.lambda"],
                 ["runworker", "--reload", "--processes", "2"]):
        done = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT,
                              env=subprocess_env(), capture_output=True, text=True, timeout=60)
        assert done.returncode != 0, args
        assert "Traceback" not in done.stderr


def test_the_quota_goes_to_high_priority_first(queue: queues.QueueBackend, clock: Clock) -> None:
    # Given a lambda with a quota of 20/s, 200 low tasks and then 5 high ones
    lam = LambdaFactory(name="tests.quota", quota_per_s=20)
    earlier = clock.now - timedelta(seconds=1)
    lows = store.create([store.NewTask(lambda_id=lam.pk, collection="default", priority="low",
                                       payload={}, run_at=earlier, max_attempts=3)] * 200,
                        now=earlier)
    highs = store.create([store.NewTask(lambda_id=lam.pk, collection="default", priority="high",
                                        payload={}, run_at=clock.now, max_attempts=3)] * 5,
                         now=clock.now)
    consumer = Consumer(batch_size=500, poll_interval_s=0.1, queue=queue, clock=clock)
    # When one pass spends the first second's quota
    assert consumer.run_pass().enqueued == 20
    # Then the high tasks went first, and the rest of the quota to the earliest low ones
    assert drain(queue, "tests.quota") == (
        [("high", t.pk) for t in highs] + [("low", t.pk) for t in lows[:15]])


def test_the_quota_holds_for_all_consumers_together(queue: queues.QueueBackend,
                                                    clock: Clock) -> None:
    # Given a lambda with a quota of 20/s and 200 due tasks, and two consumers
    lam = LambdaFactory(name="tests.quota", quota_per_s=20)
    store.create([store.NewTask(lambda_id=lam.pk, collection="default", priority="default",
                                payload={}, run_at=clock.now, max_attempts=3)] * 200,
                 now=clock.now)
    consumers = [Consumer(batch_size=500, poll_interval_s=0.1, queue=queue, clock=clock)
                 for _ in range(2)]
    # When both take a pass within the same second, and again half a second later
    first = sum(consumer.run_pass().enqueued for consumer in consumers)
    clock.advance(0.5)
    second = sum(consumer.run_pass().enqueued for consumer in consumers)
    # Then together they enqueued one second's quota, then half a second's: not twice that
    assert (first, second) == (20, 10)


def test_within_a_priority_the_earliest_due_goes_first(consumer: Consumer,
                                                        queue: queues.QueueBackend,
                                                        clock: Clock) -> None:
    # Given overdue tasks scheduled in another order than they fell due
    due_2h_ago = atf.schedule("demo.noop", run_at=clock.now - timedelta(hours=2))
    due_10h_ago = atf.schedule("demo.noop", run_at=clock.now - timedelta(hours=10))
    due_now = atf.schedule("demo.noop", run_at=clock.now)
    high_due_now = atf.schedule("demo.noop", priority="high", run_at=clock.now)
    # When a pass takes fewer than all of them
    consumer.batch_size = 3
    assert consumer.run_pass().enqueued == 3
    # Then high went first, then the longest overdue, each queue in due order
    assert drain(queue, "demo.noop") == [("high", high_due_now.pk), ("default", due_10h_ago.pk),
                                         ("default", due_2h_ago.pk)]
    assert TaskEntity.objects.get(pk=due_now.pk).status == "new"


def test_the_messages_of_one_pass_are_pushed_high_first(
        consumer: Consumer, redis_client: redis.Redis, queue: queues.QueueBackend) -> None:
    # Given low, default and high tasks, scheduled in that order
    for priority in ("low", "default", "high"):
        atf.schedule("demo.noop", priority=priority)
    # When a pass pushes them, watched by MONITOR (the order a waiting worker sees them in;
    # MONITOR shows the whole server, so only this lambda's queues count)
    ours = {queue.queue_name("demo.noop", p): p for p in ("high", "default", "low")}
    with redis_client.monitor() as monitor:
        consumer.run_pass()
        pushed = []
        for command in monitor.listen():
            words = command["command"].split()
            if words[0] == "LPUSH" and words[1].strip('"') in ours:
                pushed.append(ours[words[1].strip('"')])
            if len(pushed) == 3:
                break
    # Then the high queue was pushed first and the low one last
    assert pushed == ["high", "default", "low"]


@pytest.mark.django_db(transaction=True)
def test_a_consumer_leaves_a_lambda_alone_while_another_consumer_enqueues_it(
        queue: queues.QueueBackend, clock: Clock) -> None:
    # Given due tasks, and another consumer in the middle of its turn on their lambda
    tasks = [atf.schedule("demo.noop") for _ in range(3)]
    lambda_id = Lambda.objects.get(name="demo.noop").pk
    holding, release = threading.Event(), threading.Event()

    def other_consumer() -> None:
        with closing_connections(), turns.lambda_turn(lambda_id) as granted:
            assert granted
            holding.set()
            release.wait(10)

    other = threading.Thread(target=other_consumer)
    other.start()
    holding.wait(10)
    consumer = Consumer(batch_size=500, poll_interval_s=0.1, queue=queue, clock=clock)
    try:
        # When this consumer makes a pass, it skips the lambda
        assert consumer.run_pass().enqueued == 0
    finally:
        release.set()
        other.join(10)
    # Then once the other's turn is over it takes the lambda's tasks
    assert consumer.run_pass().enqueued == 3
    assert sorted(task_id for _p, task_id in drain(queue, "demo.noop")) == [t.pk for t in tasks]


def test_a_lambda_with_a_few_new_tasks_goes_before_a_backlogged_one(
        consumer: Consumer, clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a lambda with more due tasks than its share of a pass (500 / 2), and another
    # with one due task
    scheduling.schedule_many([{"lambda": "demo.noop"}] * 1000)
    atf.schedule("demo.record", {"key": "demo:x"})
    served: list[str] = []
    enqueue_due = store.enqueue_due

    def recording(lambda_id: int, **kwargs: object) -> store.DueBatch:
        served.append(Lambda.objects.get(pk=lambda_id).name)
        return enqueue_due(lambda_id, **kwargs)

    monkeypatch.setattr(store, "enqueue_due", recording)
    clock.catch_up()
    consumer.run_pass()  # the first pass: whichever its turn names first
    for _ in range(2):  # both turns of the round-robin
        # When the other lambda gets a new task while the first is still backlogged
        atf.schedule("demo.record", {"key": "demo:x"})
        served.clear()
        clock.catch_up()
        consumer.run_pass()
        # Then the pass serves it first, and the backlogged one still gets its share
        assert served == ["demo.record", "demo.noop"]
    assert TaskEntity.objects.filter(status="enqueued", lambda_ref__name="demo.noop").count() \
        == 3 * 250


def pass_until_idle(consumer: Consumer) -> PassSummary:
    """Passes until one handles nothing: everything due at the clock's time, summed."""
    total = PassSummary()
    while True:
        summary = consumer.run_pass()
        if not summary.total and not summary.reenqueued:
            return total
        total.add(summary)


def test_a_backlog_nobody_serves_holds_one_message_a_task_and_comes_back_after_a_flush(
        queue: queues.QueueBackend, clock: Clock, redis_client: redis.Redis,
        settings: object) -> None:
    # Given a lambda with no worker, 3,000 due tasks and a 2 s enqueue timeout
    settings.ATF_ENQUEUE_TIMEOUT_S = 2
    lam = LambdaFactory(name="tests.unserved")
    due_tasks(lam, 3000, clock.now)
    consumer = Consumer(batch_size=3000, poll_interval_s=0.1, queue=queue, clock=clock)
    names = [queue.queue_name(lam.name, p) for p in atf_settings.priorities]
    assert pass_until_idle(consumer).enqueued == 3000
    # When six enqueue timeouts pass, each re-enqueueing every task
    for _ in range(6):
        clock.advance(2.1)
        assert pass_until_idle(consumer).reenqueued == {"enqueued": 3000}
        # Then its queue holds one message per task, not one more per timeout
        assert sum(queue.depth(name) for name in names) == 3000
    # And when Redis is flushed, every task is back in its queue one timeout later
    redis_client.flushdb()
    clock.advance(2.1)
    assert pass_until_idle(consumer).reenqueued == {"enqueued": 3000}
    assert sum(queue.depth(name) for name in names) == 3000
    waiting = {message.task_id for _priority, message in _messages(queue, names)}
    assert waiting == set(TaskEntity.objects.filter(lambda_ref=lam).values_list("pk", flat=True))


def _messages(queue: queues.QueueBackend,
              names: list[str]) -> list[tuple[str, queues.Message]]:
    found = []
    while popped := queue.pop(names, max_count=1000, wait_s=0):
        found += [(item.queue, item.message) for item in popped if item.message is not None]
    return found


def test_a_stale_copy_a_worker_pops_does_not_run_the_task_twice(
        consumer: Consumer, queue: queues.QueueBackend, redis_client: redis.Redis) -> None:
    # Given a task in its queue, and a second copy of its message behind it (as SQS, or a
    # consumer of an older version, would push after the enqueue timeout)
    task = atf.schedule("demo.noop")
    consumer.run_pass()
    name = queue.queue_name("demo.noop", "default")
    (body,) = redis_client.lrange(name, 0, -1)
    redis_client.lpush(name, body)
    # When a worker takes everything from the queue and runs what it claimed
    outcomes = testing.run_due_tasks(lambdas=["demo.noop"])
    # Then the task ran once: the second copy's lease was stale by then, and it was dropped
    assert [(o.task_id, o.status) for o in outcomes] == [(task.pk, "success")]
    assert attempt_history.count(TaskEntity.objects.get(pk=task.pk)) == 1
    assert queue.depth(name) == 0



def test_the_pass_finds_due_rows_without_walking_those_a_drain_already_took(
        consumer: Consumer, clock: Clock) -> None:
    """Each row the consumer enqueues leaves a dead entry at the old end of the due index
    until no snapshot can see it (in a busy store there always is one). The pass's probe for
    lambdas with due rows reads that index from now backwards, so it meets live rows first
    and its cost does not grow with the drain: read forwards, it walked every dead entry
    (13,000 buffers a probe, 87 ms, in a 60,000-task drain on 16 cores)."""
    for _ in range(3):
        scheduling.schedule_many([{"lambda": "demo.noop"}] * 1000)
    clock.catch_up()
    for _ in range(5):
        assert consumer.run_pass().enqueued == 500
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE tasks_core_taskassoc")
        sql, params = _lambda_gates_query().query.get_compiler(connection=connection).as_sql()
        now = connection.ops.adapt_datetimefield_value(clock.now)
        placeholder = connection.ops.adapt_datetimefield_value(compiled_query.NOW)
        cursor.execute(f"EXPLAIN {sql}", [now if p == placeholder else p for p in params])
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert plan.count(" Scan Backward using assoc_") == len(
        atf_settings.priorities), plan
    assert consumer.run_pass().enqueued == 500  # the probe still finds the last due rows
    assert consumer.run_pass().total == 0


def test_a_consumer_behind_on_retention_prunes_after_each_pass_until_caught_up(
        queue: queues.QueueBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    """A round of retention has a time budget; a round that leaves tasks past the retention
    does not wait a housekeeping interval (or a poll) for the next: the loop prunes again
    after the next pass, without sleeping, until none is left."""
    from tasks_core import retention
    from tests.integration.tasks_core.test_retention import WEEK, bulk_tasks

    now = timezone.now()
    bulk_tasks(LambdaFactory(), count=1_200, statuses=[TaskStatus.SUCCESS],
               finished_at=now - 2 * WEEK)
    outcomes.fold(now=now, budget_s=float("inf"))
    monkeypatch.setattr(retention, "PRUNE_BUDGET_S", 0.0)  # one batch a round
    consumer = Consumer(batch_size=500, poll_interval_s=5.0, queue=queue)
    consumer.housekeep(now)
    assert TaskEntity.objects.count() == 700 and consumer.retention_behind
    started = time.monotonic()
    consumer._sleep(PassSummary())  # an idle pass: a poll of 5 s, were retention not behind
    assert time.monotonic() - started < 1.0
    consumer.catch_up_retention()
    assert TaskEntity.objects.count() == 200 and consumer.retention_behind
    consumer.catch_up_retention()
    assert TaskEntity.objects.count() == 0 and not consumer.retention_behind
