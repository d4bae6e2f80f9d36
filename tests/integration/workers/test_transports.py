"""The same worker behaviours over both transports: a worker that reaches the store itself
(direct) and one that reaches it only through the worker API (remote, over HTTP).

Each test runs once per transport, so a field of the claimed task that one side drops, or a
call that one side carries out differently, fails here.
"""

from __future__ import annotations

import copy
import dataclasses
import gc
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone

from tasks_core import atf, directory, lambda_sync, overrides, queues, store, waited_results
from tasks_core.context import TaskContext, TimeLimitExceeded
from tasks_core.models import Lambda, TaskAssoc, TaskAttempt, TaskEntity, TaskStep
from tasks_core.states import TaskStatus
from tasks_core.store import guarded
from tests.attempts import attempts_of
from tests.conftest import wait_for, write_waits_on_a_lock
from tests.remote import worker_token
from workers import interrupts, turns
from workers.buffer import WorkBuffer
from workers.consumer import Consumer
from workers.heartbeat import HeartbeatThread
from workers.http_transport import HttpTransport
from workers.transport import Beat, DirectTransport, Transport, TransportUnavailable, WorkerInfo
from workers.worker import WorkerProcess

pytestmark = [pytest.mark.django_db(transaction=True)]

WORKER = WorkerInfo(worker_id="tests:1:transports", host="tests", pid=1,
                    lambdas=("demo.sleep", "demo.noop"), threads=1)


@pytest.fixture(params=["direct", "remote"])
def transport(request: pytest.FixtureRequest, queue: queues.QueueBackend) -> Iterator[Transport]:
    """Each kind of worker's way to ATF; the remote one talks to this test's live API."""
    lambda_sync.sync_to_store()
    chosen: Transport
    if request.param == "direct":
        chosen = DirectTransport(queue)
    else:
        url = request.getfixturevalue("live_server").url
        chosen = HttpTransport(url=url, token=worker_token(), claim_wait_s=0.2, timeout_s=10)
    yield chosen
    chosen.close()


@pytest.fixture
def consumer(queue: queues.QueueBackend) -> Consumer:
    return Consumer(batch_size=500, poll_interval_s=0.1, queue=queue)


def claim_one(transport: Transport, consumer: Consumer) -> store.ClaimedTask:
    """Enqueue what is due, register, and claim the one task (claimed and started at once)."""
    consumer.run_pass()
    transport.register(WORKER)
    (claimed,) = wait_for(lambda: transport.claim(10), message="a claimed task")
    return claimed


@contextmanager
def worker_running(transport: Transport, lambdas: list[str]) -> Iterator[threading.Thread]:
    """A one-executor worker over `transport`, in a thread of this process, for the block: the
    thread runs the worker as a `runworker` process's main thread does, nothing around it (the
    worker closes that thread's connection itself)."""
    worker = WorkerProcess(lambdas, threads=1, transport=transport)
    thread = threading.Thread(target=worker.run, name="WorkerUnderTest")
    thread.start()
    try:
        yield thread
    finally:
        worker.stop()
        thread.join(30)


def test_a_claimed_task_carries_everything_its_attempt_needs(transport: Transport,
                                                             consumer: Consumer) -> None:
    # Given a task with its own priority, collection, payload, attempts and time limit
    task = atf.schedule("demo.sleep", {"seconds": 1, "note": "é"}, priority="high",
                        collection="transports", max_attempts=4, timeout=2.5)
    # When a worker claims it
    claimed = claim_one(transport, consumer)
    # Then the claimed task is the whole of it, with its lambda's heartbeat timeout
    row = TaskEntity.objects.get(pk=task.pk)
    assert claimed == store.ClaimedTask(
        task_id=task.pk, lease=row.lease, lambda_name="demo.sleep", collection="transports",
        priority="high", payload={"seconds": 1, "note": "é"}, attempt=1, max_attempts=4,
        timeout_s=2.5, heartbeat_timeout_s=directory.by_name("demo.sleep").heartbeat_timeout_s)


def test_a_task_without_a_time_limit_gets_its_lambdas(transport: Transport,
                                                      consumer: Consumer) -> None:
    # Given an operator's time limit of 7 s for the lambda, and a task without one of its own
    overrides.apply(Lambda.objects.get(name="demo.sleep"), {"timeout": 7}, by="tests",
                    now=timezone.now())
    directory.clear()
    atf.schedule("demo.sleep", {"seconds": 1})
    # Then the claimed task carries the lambda's
    assert claim_one(transport, consumer).timeout_s == 7


def test_an_attempt_past_its_time_limit_ends_timeout(transport: Transport,
                                                     consumer: Consumer) -> None:
    # Given a task that would sleep 30 s with a time limit of 1 s and one attempt
    task = atf.schedule("demo.sleep", {"seconds": 30}, timeout=1, max_attempts=1)
    consumer.run_pass()
    # When a worker over this transport runs it
    with worker_running(transport, ["demo.sleep"]):
        wait_for(lambda: TaskEntity.objects.get(pk=task.pk).status == TaskStatus.DEAD,
                 timeout_s=20, message="the task dead")
    # Then its one attempt ended `timeout` about a second after it began
    (attempt,) = TaskAttempt.objects.filter(task_id=task.pk)
    assert attempt.outcome == "timeout"
    assert attempt.error["type"] == "TimeLimitExceeded"
    assert (attempt.ended_at - attempt.started_at).total_seconds() < 2.5


def test_a_running_task_that_is_cancelled_stops_and_its_worker_goes_on(
        transport: Transport, consumer: Consumer) -> None:
    # Given a worker over this transport running a long task (one that heartbeats)
    long = atf.schedule("demo.sleep", {"seconds": 60}, timeout=0)
    consumer.run_pass()
    with worker_running(transport, ["demo.sleep", "demo.noop"]) as thread:
        wait_for(lambda: TaskEntity.objects.get(pk=long.pk).status == TaskStatus.PROCESSING,
                 message="the long task running")
        # When it is cancelled
        atf.cancel(long.pk)
        # Then its worker stops it: the attempt and the task end `cancelled`, in seconds
        wait_for(lambda: TaskEntity.objects.get(pk=long.pk).status == TaskStatus.CANCELLED,
                 timeout_s=15, message="the task cancelled")
        (attempt,) = TaskAttempt.objects.filter(task_id=long.pk)
        assert (attempt.outcome, attempt.error["type"]) == ("cancelled", "TaskCancelled")
        assert (attempt.ended_at - attempt.started_at).total_seconds() < 10
        # ...and its one executor goes on with the next task
        after = atf.schedule("demo.noop")
        consumer.run_pass()
        wait_for(lambda: TaskEntity.objects.get(pk=after.pk).status == TaskStatus.SUCCESS,
                 message="the next task")
        assert thread.is_alive()


def test_a_time_limit_reaches_a_lambda_waiting_on_its_heartbeat_and_the_write_stays_whole(
        transport: Transport, consumer: Consumer) -> None:
    # Given a running task whose row another transaction holds locked, so a write waits
    atf.schedule("demo.noop")
    task = claim_one(transport, consumer)
    beats = HeartbeatThread(buffer=WorkBuffer(priorities=["default"], executors=1),
                            interval_s=1.0, transport=transport)
    stopped = threading.Event()

    def lambda_heartbeating() -> None:
        try:
            beats.beat_one(task)
        except TimeLimitExceeded:
            stopped.set()

    with transaction.atomic():
        TaskEntity.objects.select_for_update().get(pk=task.task_id)
        before = TaskEntity.objects.get(pk=task.task_id).heartbeat_at
        lambda_thread = threading.Thread(target=lambda_heartbeating)
        lambda_thread.start()
        # When the lambda's own heartbeat is waiting on the lock and its time limit strikes
        wait_for(write_waits_on_a_lock, message="the heartbeat's write waiting on the lock")
        interrupts.interrupt(lambda_thread.ident, TimeLimitExceeded)
        # Then the lambda is stopped while the write still waits: it is not stuck inside it
        assert stopped.wait(5), "the interrupt did not reach a lambda waiting on its heartbeat"
    lambda_thread.join(5)
    # ...and the write, left whole, renews the lease once the lock is gone
    wait_for(lambda: TaskEntity.objects.get(pk=task.task_id).heartbeat_at != before,
             message="the heartbeat written")
    # ...and once the worker stops heartbeating, a lambda's heartbeat says its lease will lapse
    beats.stop()
    assert beats.beat_one(task) is False


def test_a_heartbeat_renews_a_current_lease_and_reports_a_stale_one(transport: Transport,
                                                                    consumer: Consumer) -> None:
    atf.schedule("demo.noop")
    task = claim_one(transport, consumer)
    before = TaskEntity.objects.get(pk=task.task_id).heartbeat_at
    # When the worker heartbeats with its lease, Then the lease is renewed
    assert transport.heartbeat({task.task_id: task.lease}) == Beat(lost=set())
    assert TaskEntity.objects.get(pk=task.task_id).heartbeat_at > before
    # ...and with any other lease, the task is reported lost
    assert transport.heartbeat({task.task_id: task.lease - 1}) == Beat(lost={task.task_id})
    # ...and once a cancel asks to stop it, the heartbeat says so
    atf.cancel(task.task_id)
    assert transport.heartbeat({task.task_id: task.lease}) == Beat(lost=set(),
                                                                   cancel={task.task_id})


def test_a_result_under_a_lease_that_moved_on_is_refused(transport: Transport,
                                                         consumer: Consumer) -> None:
    # Given a running task whose worker went silent past its heartbeat timeout, so that the
    # consumer enqueued it again under a new lease
    atf.schedule("demo.noop")
    task = claim_one(transport, consumer)
    later = timezone.now() + timedelta(seconds=task.heartbeat_timeout_s + 1)
    consumer.clock = lambda: later
    consumer.run_pass()
    assert TaskEntity.objects.get(pk=task.task_id).lease != task.lease
    # When the first worker reports its result, Then it is refused and nothing is written
    result = store.Result(outcome=store.Outcome.SUCCESS, value={"late": True},
                          started_at=timezone.now(), worker=WORKER.worker_id)
    assert transport.finish_many([(task, result)]) == [None]
    assert TaskEntity.objects.get(pk=task.task_id).result is None
    # ...and its heartbeat finds the lease lost
    assert transport.heartbeat({task.task_id: task.lease}).lost == {task.task_id}


def test_a_result_is_recorded_with_its_attempt(transport: Transport, consumer: Consumer) -> None:
    atf.schedule("demo.noop")
    task = claim_one(transport, consumer)
    result = store.Result(outcome=store.Outcome.SUCCESS, value={"rows": [1, "é", None]},
                          started_at=timezone.now(), worker=WORKER.worker_id)
    assert transport.finish_many([(task, result)]) == [TaskStatus.SUCCESS]
    row = TaskEntity.objects.get(pk=task.task_id)
    assert (row.status, row.result) == (TaskStatus.SUCCESS, {"rows": [1, "é", None]})
    assert not TaskAttempt.objects.filter(task_id=task.task_id).exists()  # the row holds it
    (attempt,) = attempts_of(task.task_id)
    assert (attempt.number, attempt.outcome, attempt.worker) == (1, "success", WORKER.worker_id)


def test_a_retry_waits_its_explicit_delay(transport: Transport, consumer: Consumer) -> None:
    atf.schedule("demo.noop", max_attempts=3)
    task = claim_one(transport, consumer)
    # When the attempt asks to be retried after 600 s (atf.Retry(delay=600))
    result = store.Result(outcome=store.Outcome.RETRY, delay_s=600.0,
                          error={"type": "Retry", "message": "later", "traceback": ""},
                          started_at=timezone.now(), worker=WORKER.worker_id)
    finished_at = timezone.now()
    assert transport.finish_many([(task, result)]) == [TaskStatus.RETRYING]
    # Then the task is due again 600 s later, not after its backoff
    due_at = TaskAssoc.objects.get(task_id=task.task_id).next_trigger_at
    due_in_s = (due_at - finished_at).total_seconds()
    assert 599 <= due_in_s <= 605


def xmins(*task_ids: int) -> set[int]:
    """The transactions that last wrote these tasks' rows (one id: one commit)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT xmin::text FROM tasks_core_taskentity WHERE id = ANY(%s)",
                       [list(task_ids)])
        return {int(xmin) for (xmin,) in cursor.fetchall()}


def test_a_claim_carrying_results_records_them_and_claims_the_next_tasks_in_one_commit(
        transport: Transport, consumer: Consumer) -> None:
    # Given a running task, and two more tasks ready
    atf.schedule("demo.noop")
    running = claim_one(transport, consumer)
    ready = {atf.schedule("demo.noop", {"n": n}).pk for n in range(2)}
    consumer.run_pass()
    # When the worker claims, carrying the running task's result
    result = store.Result(outcome=store.Outcome.SUCCESS, value={"carried": True},
                          started_at=timezone.now(), worker=WORKER.worker_id)
    statuses, claimed = transport.finish_and_claim([(running, result)], 10)
    # Then the result is recorded, answered as finish_many answers it, and the ready tasks
    # are claimed and started, all in one commit
    assert statuses == [TaskStatus.SUCCESS]
    row = TaskEntity.objects.get(pk=running.task_id)
    assert (row.status, row.result) == (TaskStatus.SUCCESS, {"carried": True})
    (attempt,) = attempts_of(running.task_id)
    assert (attempt.outcome, attempt.worker) == ("success", WORKER.worker_id)
    assert {task.task_id for task in claimed} == ready
    assert all(task.attempt == 1 for task in claimed)
    assert set(TaskEntity.objects.filter(pk__in=ready).values_list("status", flat=True)) == {
        TaskStatus.PROCESSING}
    assert len(xmins(running.task_id, *ready)) == 1


def test_a_claim_carrying_a_result_whose_lease_moved_on_refuses_it_and_still_claims(
        transport: Transport, consumer: Consumer) -> None:
    # Given a running task whose worker went silent past its heartbeat timeout, so that the
    # consumer enqueued it again under a new lease
    atf.schedule("demo.noop")
    task = claim_one(transport, consumer)
    later = timezone.now() + timedelta(seconds=task.heartbeat_timeout_s + 1)
    consumer.clock = lambda: later
    consumer.run_pass()
    # When the first worker's claim carries its result
    result = store.Result(outcome=store.Outcome.SUCCESS, value={"late": True},
                          started_at=timezone.now(), worker=WORKER.worker_id)
    statuses, claimed = transport.finish_and_claim([(task, result)], 10)
    # Then the result is refused (None) and nothing of it is written, while the claim goes on:
    # it takes the task again, under a new lease, as a new attempt
    assert statuses == [None]
    assert "success" not in [attempt.outcome for attempt in attempts_of(task.task_id)]
    (again,) = claimed
    assert (again.task_id, again.attempt) == (task.task_id, 2)
    assert again.lease != task.lease
    row = TaskEntity.objects.get(pk=task.task_id)
    assert (row.status, row.result, row.lease) == (TaskStatus.PROCESSING, None, again.lease)


def test_a_claim_carrying_results_answers_at_once_when_no_task_is_ready(
        transport: Transport, consumer: Consumer) -> None:
    atf.schedule("demo.noop")
    task = claim_one(transport, consumer)
    result = store.Result(outcome=store.Outcome.SUCCESS, started_at=timezone.now(),
                          worker=WORKER.worker_id)
    began = time.monotonic()
    assert transport.finish_and_claim([(task, result)], 10) == ([TaskStatus.SUCCESS], [])
    # No wait for work: the claim wait of this transport would be at least 0.2 s
    assert time.monotonic() - began < 0.2
    assert TaskEntity.objects.get(pk=task.task_id).status == TaskStatus.SUCCESS


def test_a_worker_records_most_results_in_its_claims(transport: Transport,
                                                     consumer: Consumer) -> None:
    # Given 40 ready tasks, and a one-executor worker whose writes are counted
    ids = [atf.schedule("demo.noop", {"n": n}).pk for n in range(40)]
    consumer.run_pass()
    carried: list[int] = []
    written: list[int] = []
    finish_and_claim, finish_many = transport.finish_and_claim, transport.finish_many

    def counted_claim(done: Any, max_count: int) -> Any:
        carried.append(len(done))
        return finish_and_claim(done, max_count)

    def counted_finish(done: Any) -> Any:
        written.append(len(done))
        return finish_many(done)

    transport.finish_and_claim = counted_claim  # type: ignore[method-assign]
    transport.finish_many = counted_finish  # type: ignore[method-assign]
    # When it drains them
    with worker_running(transport, ["demo.noop"]):
        wait_for(lambda: TaskEntity.objects.filter(pk__in=ids, status=TaskStatus.SUCCESS)
                 .count() == len(ids), timeout_s=30, message="every task succeeded")
    # Then every result was recorded once, and claims carried most of them (an executor's
    # result goes with the claim of its next task)
    assert sum(len(attempts_of(task_id)) for task_id in ids) == len(ids)
    assert sum(carried) + sum(written) == len(ids)
    assert sum(carried) > len(ids) / 2, (carried, written)


def test_a_remote_worker_facing_an_api_without_claimed_results_writes_them_through_finish(
        live_server: Any, queue: queues.QueueBackend, consumer: Consumer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Given an API of the release before claims carried results (its claim/ has no `results`)
    from tasks_api import worker_serializers as shapes
    from tasks_api import worker_views

    older = type("OlderClaimSerializer", (shapes.WorkerIdSerializer,), {
        **{name: copy.deepcopy(shapes.ClaimSerializer._declared_fields[name])
           for name in ("max", "wait_s", "start")},
        "reported_ends": lambda self: []})
    monkeypatch.setattr(worker_views.shapes, "ClaimSerializer", older)
    lambda_sync.sync_to_store()
    transport = HttpTransport(url=live_server.url, token=worker_token(), claim_wait_s=0.2,
                              timeout_s=10)
    try:
        atf.schedule("demo.noop")
        task = claim_one(transport, consumer)
        result = store.Result(outcome=store.Outcome.SUCCESS, started_at=timezone.now(),
                              worker=WORKER.worker_id)
        # When a claim carries a result, Then the worker learns that claims carry none here
        with pytest.raises(TransportUnavailable):
            transport.finish_and_claim([(task, result)], 1)
        assert transport.carries_results is False
        # ...and finish/ records the result as before
        assert transport.finish_many([(task, result)]) == [TaskStatus.SUCCESS]
    finally:
        transport.close()


def _sessions_on_the_database() -> set[int]:
    """Backend pids of the other sessions on the test database."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pid FROM pg_stat_activity"
                       " WHERE datname = current_database() AND pid <> pg_backend_pid()")
        return {pid for (pid,) in cursor.fetchall()}


@pytest.mark.skipif(connection.vendor != "postgresql", reason="pg_stat_activity")
def test_a_stopped_worker_leaves_no_database_connection_behind(queue: queues.QueueBackend,
                                                               consumer: Consumer) -> None:
    # Given a worker's threads that each used the database (a heartbeating lambda's own beat
    # too, and the thread that ran the worker: it registered and deregistered it)
    transport = DirectTransport(queue)
    lambda_sync.sync_to_store()
    task = atf.schedule("demo.sleep", {"seconds": 1.1})  # it heartbeats once
    consumer.run_pass()
    turns.reset()  # the consumer pass's own turns connection
    before = _sessions_on_the_database()
    # ...with no garbage collection to close what a thread leaves when it ends
    gc.disable()
    try:
        with worker_running(transport, ["demo.sleep"]):
            wait_for(lambda: TaskEntity.objects.get(pk=task.pk).status == TaskStatus.SUCCESS,
                     message="the task succeeded")
        # When it has stopped, Then every connection its threads opened is closed
        wait_for(lambda: _sessions_on_the_database() <= before, timeout_s=10,
                 message="the worker's connections closed")
    finally:
        gc.enable()


def test_a_groups_callback_reads_its_members_results_page_by_page(
        transport: Transport, consumer: Consumer, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a group of 5 whose members succeeded, results pages of 2, and its `then` claimed
    monkeypatch.setattr(waited_results, "RESULTS_PAGE", 2)
    group = atf.group([atf.call("demo.noop", {"n": n}) for n in range(5)],
                      then=atf.call("demo.noop"))
    for n, member in enumerate(group.members.order_by("pk")):
        TaskEntity.objects.filter(pk=member.pk).update(status=TaskStatus.SUCCESS, result=n)
    with transaction.atomic():
        assert guarded.wake(group.then_id, timezone.now())
    claimed = claim_one(transport, consumer)
    assert claimed.task_id == group.then_id
    # When it reads its parents' results over this transport, Then it gets all 5, in order
    ctx = TaskContext(task_id=claimed.task_id, attempt=claimed.attempt,
                      collection=claimed.collection, priority=claimed.priority,
                      lambda_name=claimed.lambda_name, _lease=claimed.lease,
                      _link=transport.task_link)
    assert ctx.parent_results() == [0, 1, 2, 3, 4]


def test_steps_are_recorded_under_the_lease_over_the_transport(
        transport: Transport, consumer: Consumer) -> None:
    # Given a running task claimed over this transport
    task = atf.schedule("demo.noop")
    claimed = claim_one(transport, consumer)
    ctx = TaskContext(task_id=task.pk, attempt=claimed.attempt, collection=claimed.collection,
                      priority=claimed.priority, lambda_name=claimed.lambda_name,
                      _lease=claimed.lease, _link=transport.task_link)
    # When it runs a step, Then the step is recorded, and read back by a later context
    assert ctx.step("charge", lambda order: {"charged": order}, 7) == {"charged": 7}
    again = dataclasses.replace(ctx, _steps=None)
    assert again.step("charge", lambda order: pytest.fail("ran twice"), 7) == {"charged": 7}
    # ...while an execution whose lease moved on records nothing
    stale = dataclasses.replace(ctx, _lease=claimed.lease - 1, _steps=None)
    with pytest.raises(atf.LeaseLost):
        stale.step("refund", lambda: "refunded")
    assert list(TaskStep.objects.filter(task_id=task.pk).values_list("name", flat=True)) == [
        "charge"]
