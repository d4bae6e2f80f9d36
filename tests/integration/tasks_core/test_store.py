"""The task store's contract: every operation and its guards, against the real database.

Every test runs against each store backend (tasks_core.store.backends): on PostgreSQL both its
batch statements and the ORM backend, whose row locks PostgreSQL really takes; and the whole
suite runs again in the SQLite smoke run of `make test` (marked `sqlite`), with the ORM backend.
"""

from __future__ import annotations

import functools
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta

import pytest
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from tasks_core import atf, conf, directory, overrides, scheduling, states, store
from tasks_core.exceptions import InvalidTask, InvalidTransition
from tasks_core.models import Collection, Lambda, TaskAssoc, TaskAttempt, TaskEntity
from tasks_core.queues import Message
from tasks_core.states import AssocStatus, TaskStatus
from tasks_core.store import backends
from tasks_core.store.backends.base import StoreBackend
from tasks_core.store.backends.orm import OrmBackend
from tests.attempts import attempts_of
from tests.conftest import race, wait_for, write_waits_on_a_lock
from tests.store_steps import claim, enqueue_due, messages

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]

Outcome = store.Outcome

ON_POSTGRES = "postgresql" in settings.DATABASES["default"]["ENGINE"]


@pytest.fixture(autouse=True, params=["postgres", "orm"] if ON_POSTGRES else ["orm"])
def backend(request: pytest.FixtureRequest, database_route: str) -> Iterator[StoreBackend]:
    """The store backend under test, for the whole test (threads included); the tests marked
    `pooled` run it through PgBouncer too, in each pool mode (tests/conftest.py)."""
    if request.param == "postgres":
        from tasks_core.store.backends.postgres import PostgresBackend

        # Prepared (ATF_DB_PREPARED_STATEMENTS on) but behind the transaction-mode pooler.
        chosen: StoreBackend = PostgresBackend(prepare=database_route != "pgbouncer-transaction")
    else:
        chosen = OrmBackend()
    backends.use(chosen)
    yield chosen
    backends.use(None)


@pytest.fixture
def now() -> datetime:
    """A moment after the tasks a test schedules (scheduling reads the real clock)."""
    return timezone.now() + timedelta(seconds=1)


def running(now: datetime, payload: object = None, **options: object) -> store.ClaimedTask:
    """A demo.noop task taken all the way to processing."""
    atf.schedule("demo.noop", payload or {}, **options)
    (claimed,) = claim(messages(enqueue_due("demo.noop", now)), now)
    assert store.start(claimed, now=now)
    return claimed


def entity(task_id: int) -> TaskEntity:
    return TaskEntity.objects.select_related("assoc").get(pk=task_id)


def history(task_id: int) -> list[tuple[int, str]]:
    """(number, outcome) of each attempt at the task, oldest first."""
    return [(attempt.number, attempt.outcome) for attempt in attempts_of(task_id)]


def success() -> store.Result:
    return store.Result(outcome=Outcome.SUCCESS, value={"ok": True})


def failure(outcome: Outcome = Outcome.RETRY, delay_s: float | None = None) -> store.Result:
    error = {"type": "RuntimeError", "message": "boom", "traceback": "Traceback..."}
    return store.Result(outcome=outcome, error=error, delay_s=delay_s)


def test_the_backend_is_chosen_from_the_database(backend: StoreBackend) -> None:
    backends.use(None)
    chosen = backends.current()
    assert type(chosen).__name__ == ("PostgresBackend" if ON_POSTGRES else "OrmBackend")
    assert backends.current() is chosen


# --- the happy path, step by step -----------------------------------------------------------


def test_a_task_walks_the_whole_lifecycle(now: datetime) -> None:
    # Given a task scheduled now
    task = atf.schedule("demo.noop", {"n": 1}, priority="high")
    assert (task.status, task.assoc.status, task.lease) == ("new", "new", 0)
    # When the consumer enqueues it
    batch = enqueue_due("demo.noop", now)
    # Then the store says enqueued with a new lease before any push
    assert [(p, m.task_id, m.lease) for p, m in batch.messages] == [("high", task.pk, 1)]
    row = entity(task.pk)
    assert (row.status, row.assoc.status, row.lease) == ("enqueued", "started", 1)
    assert row.assoc.next_trigger_at > now
    # When a controller claims it and an executor starts and finishes it
    (claimed,) = claim(messages(batch), now)
    assert (claimed.lease, claimed.payload, claimed.attempt) == (2, {"n": 1}, 1)
    assert entity(task.pk).status == "claimed"
    assert store.start(claimed, now=now)
    assert (entity(task.pk).status, entity(task.pk).attempts) == ("processing", 1)
    assert store.finish(claimed, success(), now=now) is TaskStatus.SUCCESS
    # Then it is final, with its result and one attempt, and its assoc row is gone
    row = TaskEntity.objects.get(pk=task.pk)
    assert (row.status, TaskAssoc.objects.filter(task_id=task.pk).exists()) == ("success", False)
    assert row.result == {"ok": True}
    assert history(task.pk) == [(1, "success")]
    # And the task's row is that attempt's only record: the success wrote no attempt row
    assert not TaskAttempt.objects.filter(task=row).exists()
    (attempt,) = attempts_of(task.pk)
    assert (attempt.worker, attempt.started_at, attempt.ended_at) == ("w1", now, now)


@pytest.mark.parametrize(("ending", "status"), [
    (success(), TaskStatus.SUCCESS), (failure(Outcome.FATAL), TaskStatus.FATAL_FAILURE),
    (failure(), TaskStatus.DEAD)])  # its one attempt failed
def test_a_finish_deletes_the_assoc_row_only_of_a_status_nothing_leads_out_of(
        now: datetime, ending: store.Result, status: TaskStatus) -> None:
    """A success's assoc row goes with its finish (no requeue revives a success); a fatal
    failure's or a dead letter's stays `completed`, out of the consumer's index, until a
    requeue makes it due again."""
    task = running(now, max_attempts=1)
    assert store.finish(task, ending, now=now) is status
    assoc = TaskAssoc.objects.filter(task_id=task.task_id).first()
    if status in states.ASSOC_DELETED:
        assert assoc is None
        return
    assert assoc is not None and (assoc.status, assoc.next_trigger_at) == ("completed", None)
    assert store.requeue([task.task_id], now=now, statuses=[status]) == 1
    assert [m.task_id for m in messages(enqueue_due("demo.noop", now))] == [task.task_id]


def test_a_delayed_task_is_not_enqueued_before_its_run_at(now: datetime) -> None:
    task = atf.schedule("demo.noop", delay=60)
    assert enqueue_due("demo.noop", now).messages == []
    assert [m.task_id for m in messages(enqueue_due("demo.noop", now + timedelta(seconds=61)))
            ] == [task.pk]


def test_due_rows_come_highest_priority_first_and_earliest_first_within_one(
        now: datetime) -> None:
    # Given tasks of each priority, due at different times, scheduled in a mixed order
    low = atf.schedule("demo.noop", priority="low")
    late_high = atf.schedule("demo.noop", priority="high")
    default = atf.schedule("demo.noop", priority="default")
    early_high = atf.schedule("demo.noop", priority="high")
    TaskAssoc.objects.filter(task_id=early_high.pk).update(
        next_trigger_at=now - timedelta(seconds=5))
    # When the consumer takes three of them
    batch = enqueue_due("demo.noop", now, limit=3)
    # Then high comes first, earliest first, then default; low waits for the next pass
    assert [m.task_id for m in messages(batch)] == [early_high.pk, late_high.pk, default.pk]
    assert [m.task_id for m in messages(enqueue_due("demo.noop", now))] == [low.pk]


# --- guards that refuse ---------------------------------------------------------------------


def test_a_stale_lease_claims_nothing(now: datetime) -> None:
    # Given a task that was claimed, lost by its controller, and enqueued again
    task = atf.schedule("demo.noop")
    first = messages(enqueue_due("demo.noop", now))
    claim(first, now)
    later = now + timedelta(hours=1)
    second = messages(enqueue_due("demo.noop", later))
    assert first[0].lease < second[0].lease
    # When a controller presents the first message, nothing is claimed
    assert claim(first, later) == []
    assert entity(task.pk).status == "enqueued"
    # And the current message still claims it
    assert [c.task_id for c in claim(second, later)] == [task.pk]


def test_a_task_enqueued_again_is_claimed_by_whichever_copy_comes_first(now: datetime) -> None:
    # Given a task whose enqueue timeout fired while its first message waited in a long queue
    task = atf.schedule("demo.noop")
    first = messages(enqueue_due("demo.noop", now))
    second = messages(enqueue_due("demo.noop", now + timedelta(hours=1)))
    # Then both copies carry the same lease: the first still claims it...
    assert first[0].lease == second[0].lease
    assert [c.task_id for c in claim(first, now)] == [task.pk]
    # ...and the second copy is stale from then on
    assert claim(second, now) == []


def test_a_task_enqueued_again_keeps_its_lease_and_when_it_was_enqueued(now: datetime) -> None:
    # Given a task enqueued and never claimed
    task = atf.schedule("demo.noop")
    first = messages(enqueue_due("demo.noop", now))
    # When its enqueue timeout fires and the consumer enqueues it again
    later = now + timedelta(hours=1)
    assert enqueue_due("demo.noop", later).reenqueued == {"enqueued": 1}
    # Then it keeps its lease (the same message) and its enqueued_at (the queue's age)
    assert (entity(task.pk).lease, entity(task.pk).enqueued_at) == (first[0].lease, now)


def test_a_duplicate_claim_gets_nothing(now: datetime) -> None:
    atf.schedule("demo.noop")
    msgs = messages(enqueue_due("demo.noop", now))
    assert len(claim(msgs, now, worker="w1")) == 1
    assert claim(msgs, now, worker="w2") == []
    assert TaskEntity.objects.get().worker == "w1"


def test_held_rows_are_the_asked_tasks_one_of_the_named_workers_claimed(now: datetime) -> None:
    # Given three tasks, claimed by w1, by w2, and by nobody
    for _ in range(3):
        atf.schedule("demo.noop", {"big": "x" * 100})
    first, second, third = messages(enqueue_due("demo.noop", now))
    (mine,) = claim([first], now, worker="w1")
    (theirs,) = claim([second], now, worker="w2")
    # Then w1's rows are its own task's, as HELD_COLUMNS (no payload), and no other
    rows = store.held_rows([first.task_id, second.task_id, third.task_id], ["w1"])
    row = entity(mine.task_id)
    assert rows == [tuple(getattr(row, column) for column in store.HELD_COLUMNS)]
    assert rows[0][:2] == (mine.task_id, mine.lease)
    # And named together, w1 and w2 hold both; nobody holds the unclaimed one
    assert sorted(store.held_rows([first.task_id, second.task_id, third.task_id],
                                  ["w1", "w2"])) == sorted(
        [rows[0], store.held_rows([theirs.task_id], ["w2"])[0]])
    assert store.held_rows([third.task_id], ["w1", "w2"]) == []
    assert store.held_rows([], ["w1"]) == []


def test_a_worker_that_lost_its_lease_cannot_start_heartbeat_or_record(now: datetime) -> None:
    # Given a running task whose lease was lost: its trigger fired and it was enqueued again
    claimed = running(now)
    later = now + timedelta(minutes=5)
    batch = enqueue_due("demo.noop", later)
    assert batch.reenqueued == {"processing": 1}
    # Then the old holder's heartbeat is refused, and so is its result
    assert store.heartbeat({claimed.task_id: claimed.lease}, now=later) == {claimed.task_id}
    assert store.finish(claimed, success(), now=later) is None
    assert store.start(claimed, now=later) is False
    row = entity(claimed.task_id)
    assert (row.status, row.result) == ("enqueued", None)
    # And the lost attempt is on record
    assert list(TaskAttempt.objects.values_list("outcome", flat=True)) == ["lost"]


def test_cancel_of_a_running_task_asks_its_worker_and_of_a_claimed_one_ends_it(
        now: datetime) -> None:
    # Given a running task and a claimed one
    running_task = running(now)
    atf.schedule("demo.noop")
    (claimed,) = claim(messages(enqueue_due("demo.noop", now)), now)
    # When both are cancelled
    atf.cancel(running_task.task_id)
    atf.cancel(claimed.task_id)
    # Then the running one still runs, asked to stop, which its heartbeat hears
    assert entity(running_task.task_id).status == TaskStatus.PROCESSING
    assert store.stop_requested({running_task.task_id, claimed.task_id}) == {
        running_task.task_id}
    # ...its worker's `cancelled` attempt ends it, and the claimed one is cancelled at once
    stopped = store.Result(outcome=Outcome.CANCELLED, started_at=now,
                           error={"type": "TaskCancelled", "message": "", "traceback": ""})
    assert store.finish(running_task, stopped, now=now) == TaskStatus.CANCELLED
    assert TaskAttempt.objects.get(task_id=running_task.task_id).outcome == "cancelled"
    assert entity(claimed.task_id).status == TaskStatus.CANCELLED
    assert store.start(claimed, now=now) is False
    # ...and a requeue forgets the request
    store.requeue([running_task.task_id], now=now, statuses=[TaskStatus.CANCELLED])
    assert entity(running_task.task_id).cancel_requested_at is None


def test_a_cancelled_task_whose_worker_died_ends_cancelled_not_retried(now: datetime) -> None:
    # Given a running task that a cancel asked to stop, and its worker gone silent
    task = running(now)
    atf.cancel(task.task_id)
    # When its heartbeat timeout passes and the consumer handles it
    later = now + timedelta(seconds=task.heartbeat_timeout_s + 1)
    batch = enqueue_due("demo.noop", later)
    # Then it is not enqueued again: the lost attempt is recorded and the cancel stands
    assert batch.messages == []
    row = entity(task.task_id)
    assert (row.status, row.assoc.status, row.last_error["type"]) == (
        TaskStatus.CANCELLED, AssocStatus.COMPLETED, "Cancelled")
    assert TaskAttempt.objects.get(task_id=task.task_id).outcome == "lost"


@pytest.mark.parametrize("status", [TaskStatus.SUCCESS, TaskStatus.DEAD])
def test_cancel_is_refused_once_it_finished(status: TaskStatus, now: datetime) -> None:
    task = atf.schedule("demo.noop")
    TaskEntity.objects.filter(pk=task.pk).update(status=status)
    with pytest.raises(InvalidTransition):
        atf.cancel(task.pk)
    assert entity(task.pk).status == status


@pytest.mark.parametrize("status", sorted(states.CANCELLABLE))
def test_cancel_from_each_cancellable_status(status: TaskStatus) -> None:
    task = atf.schedule("demo.noop")
    TaskEntity.objects.filter(pk=task.pk).update(status=status)
    cancelled = atf.cancel(task.pk)
    assert cancelled.status == "cancelled"
    assert cancelled.assoc.status == "completed"
    assert cancelled.last_error["type"] == "Cancelled"


def test_transition_refuses_an_edge_the_table_forbids(now: datetime) -> None:
    task = atf.schedule("demo.noop")
    with pytest.raises(InvalidTransition):
        store.transition(task.pk, expected=TaskStatus.NEW, lease=0, target=TaskStatus.SUCCESS,
                         now=now)
    assert entity(task.pk).status == "new"


def test_a_guard_that_fails_changes_nothing_and_says_so(now: datetime) -> None:
    task = atf.schedule("demo.noop")
    moved = store.transition(task.pk, expected=TaskStatus.ENQUEUED, lease=0,
                             target=TaskStatus.CLAIMED, now=now)
    assert moved is False
    assert entity(task.pk).status == "new"


# --- outcomes, retries and the dead-letter queue -------------------------------------------


def test_outcomes_fatal_retry_with_delay_and_backoff(now: datetime) -> None:
    fatal = running(now)
    assert store.finish(fatal, failure(Outcome.FATAL), now=now) is TaskStatus.FATAL_FAILURE
    assert entity(fatal.task_id).last_error["message"] == "boom"

    explicit = running(now)
    assert store.finish(explicit, failure(delay_s=42), now=now) is TaskStatus.RETRYING
    row = entity(explicit.task_id)
    assert row.assoc.next_trigger_at == now + timedelta(seconds=42)
    assert row.assoc.status == "started"

    backoff = running(now)
    assert store.finish(backoff, failure(), now=now) is TaskStatus.RETRYING
    trigger = entity(backoff.task_id).assoc.next_trigger_at
    assert now <= trigger <= now + timedelta(seconds=60)


def test_a_retried_task_keeps_why_it_was_retried_after_it_succeeds(now: datetime) -> None:
    # Given a task whose first attempt fails
    task = atf.schedule("demo.noop")
    (first,) = claim(messages(enqueue_due("demo.noop", now)), now)
    assert store.start(first, now=now)
    assert store.finish(first, failure(delay_s=0), now=now) is TaskStatus.RETRYING
    row = entity(task.pk)
    # Then it is not finished, and says why it will run again
    assert (row.finished_at, row.result, row.last_error["message"]) == (None, None, "boom")
    # When the second attempt succeeds
    later = now + timedelta(seconds=1)
    (second,) = claim(messages(enqueue_due("demo.noop", later)), later)
    assert store.start(second, now=later)
    assert store.finish(second, success(), now=later) is TaskStatus.SUCCESS
    # Then it has its result and end, and still the error of the attempt before
    row = entity(task.pk)
    assert (row.result, row.finished_at, row.last_error["message"]) == ({"ok": True}, later,
                                                                       "boom")
    assert history(task.pk) == [(1, "retry"), (2, "success")]


def test_attempts_exhausted_goes_dead_and_requeue_brings_it_back(now: datetime) -> None:
    # Given a task allowed two attempts that fails twice
    task = atf.schedule("demo.noop", max_attempts=2)
    clock = now
    for expected in (TaskStatus.RETRYING, TaskStatus.DEAD):
        (claimed,) = claim(messages(enqueue_due("demo.noop", clock)), clock)
        assert store.start(claimed, now=clock)
        assert store.finish(claimed, failure(), now=clock) is expected
        clock += timedelta(hours=1)
    # Then it is dead, with both attempts on record
    row = entity(task.pk)
    assert (row.status, row.attempts, row.assoc.status) == ("dead", 2, "completed")
    assert list(TaskAttempt.objects.filter(task=row).values_list("outcome", flat=True)) == [
        "retry", "dead"]
    # When it is requeued from the dead-letter queue
    assert store.requeue([task.pk], now=clock) == 1
    # Then it is new again with its attempts reset, and due now
    row = entity(task.pk)
    assert (row.status, row.attempts, row.assoc.status) == ("new", 0, "new")
    assert row.assoc.next_trigger_at == clock
    # When it runs again, and its first attempt since the requeue is lost, then one succeeds
    (claimed,) = claim(messages(enqueue_due("demo.noop", clock)), clock)
    assert claimed.attempt == 1  # the lambda's count starts again (ctx.attempt)
    assert store.start(claimed, now=clock)
    lost_at = clock + timedelta(seconds=claimed.heartbeat_timeout_s + 1)
    again = enqueue_due("demo.noop", lost_at)
    assert again.reenqueued == {"processing": 1}
    (claimed,) = claim(messages(again), lost_at)
    assert store.start(claimed, now=lost_at)
    assert store.finish(claimed, success(), now=lost_at) is TaskStatus.SUCCESS
    # Then the history numbers every attempt it ever made: no second "attempt 1"
    assert history(task.pk) == [(1, "retry"), (2, "dead"), (3, "lost"), (4, "success")]
    assert entity(task.pk).attempts == 2


def test_requeue_and_discard_touch_only_dead_tasks(now: datetime) -> None:
    dead, alive = atf.schedule("demo.noop"), atf.schedule("demo.noop")
    TaskEntity.objects.filter(pk=dead.pk).update(status=TaskStatus.DEAD)
    assert store.requeue([dead.pk, alive.pk], now=now) == 1
    TaskEntity.objects.filter(pk=dead.pk).update(status=TaskStatus.DEAD)
    assert store.discard([dead.pk, alive.pk]) == 1
    assert list(TaskEntity.objects.values_list("pk", flat=True)) == [alive.pk]


def test_release_hands_claimed_tasks_back_due_at_once(now: datetime) -> None:
    atf.schedule("demo.noop", delay=0)
    claimed = claim(messages(enqueue_due("demo.noop", now)), now)
    assert store.release(claimed, now=now) == 1
    row = TaskEntity.objects.select_related("assoc").get()
    assert (row.status, row.assoc.status, row.assoc.next_trigger_at) == ("new", "new", now)


# --- expiry: every non-final state comes back when its trigger fires ------------------------


@pytest.mark.parametrize(
    ("stage", "timeout_s"),
    [("enqueued", 60), ("claimed", 30), ("processing", 30), ("retrying", 42)],
)
def test_an_expired_trigger_is_enqueued_again_once(stage: str, timeout_s: float,
                                                   now: datetime) -> None:
    # Given a task lost at `stage` (its queue message, controller or executor gone)
    task = atf.schedule("demo.noop")
    batch = enqueue_due("demo.noop", now)
    if stage != "enqueued":
        (claimed,) = claim(messages(batch), now)
        if stage in ("processing", "retrying"):
            assert store.start(claimed, now=now)
        if stage == "retrying":
            store.finish(claimed, failure(delay_s=42), now=now)
    # When the consumer polls just before the timeout, nothing happens
    early = now + timedelta(seconds=timeout_s - 1)
    assert enqueue_due("demo.noop", early).messages == []
    # When it polls after the timeout, the task is enqueued again with a new lease...
    late = now + timedelta(seconds=timeout_s + 1)
    again = messages(enqueue_due("demo.noop", late))
    assert [m.task_id for m in again] == [task.pk]
    assert entity(task.pk).status == "enqueued"
    # ...and only once for that expiry
    assert enqueue_due("demo.noop", late).messages == []


def test_a_lost_last_attempt_goes_dead_instead_of_looping(now: datetime) -> None:
    claimed = running(now, max_attempts=1)
    batch = enqueue_due("demo.noop", now + timedelta(minutes=5))
    assert (batch.messages, batch.dead) == ([], 1)
    row = entity(claimed.task_id)
    assert (row.status, row.last_error["type"]) == ("dead", "WorkerLost")


# --- scheduling: validation, idempotency, transactions ----------------------------------------


def test_schedule_validates_every_field_at_once() -> None:
    with pytest.raises(InvalidTask) as caught:
        atf.schedule("no.such", {"x": {1, 2}}, priority="urgent", delay=-1,
                     idempotency_key="k" * 1000, max_attempts=0)
    assert set(caught.value.errors) == {"lambda", "payload", "priority", "delay",
                                        "idempotency_key", "max_attempts"}
    with pytest.raises(InvalidTask) as caught:
        atf.schedule("demo.noop", run_at=datetime.now().astimezone(), delay=5)
    assert "run_at" in caught.value.errors
    assert TaskEntity.objects.count() == 0


def test_a_time_limit_is_a_number_of_seconds_and_0_is_no_limit() -> None:
    assert TaskEntity.objects.get(pk=atf.schedule("demo.noop", timeout=2.5).pk).timeout_s == 2.5
    assert TaskEntity.objects.get(pk=atf.schedule("demo.noop", timeout=0).pk).timeout_s == 0
    for bad in (-0.5, -1, True, "5", float("inf")):
        with pytest.raises(InvalidTask) as caught:
            atf.schedule("demo.noop", timeout=bad)
        assert set(caught.value.errors) == {"timeout"}


@pytest.mark.parametrize(("task_s", "operator_s", "limit_s"), [
    (None, None, conf.AtfSettings.task_timeout_s),  # nobody set one: the default
    (2.5, None, 2.5),  # the task's own
    (0, None, None),  # the task asks for no limit
    (None, 30, 30.0),  # an operator's, for the lambda
    (None, 0, None),  # an operator lifts the lambda's limit
    (5, 0, 5.0),  # the task's own wins over the operator's
])
def test_every_attempt_has_a_time_limit_unless_one_is_lifted(
        now: datetime, task_s: float | None, operator_s: float | None,
        limit_s: float | None) -> None:
    # Given demo.noop, registered without a time limit, and maybe an operator's override
    if operator_s is not None:
        overrides.apply(Lambda.objects.get(name="demo.noop"), {"timeout": operator_s},
                        by="test", now=now)
        directory.clear()
    # When a task of it (maybe with its own limit) is claimed
    claimed = running(now, timeout=task_s)
    # Then the attempt's time limit is the first one set, 0 anywhere meaning none
    assert claimed.timeout_s == limit_s


@pytest.mark.parametrize(("target", "state", "until_s", "expected"), [
    ("lambda", "paused", None, TaskStatus.NEW),
    ("collection", "paused", None, TaskStatus.NEW),
    ("lambda", "dropped", None, TaskStatus.DROPPED),
    ("collection", "dropped", None, TaskStatus.DROPPED),
    ("lambda", "paused", -1, TaskStatus.PROCESSING),  # its `until` passed: open again
])
def test_a_gate_closed_after_the_claim_stops_the_start(
        now: datetime, target: str, state: str, until_s: float | None,
        expected: TaskStatus) -> None:
    # Given a task of collection "bad" claimed by a worker, and another task claimed beside it
    atf.schedule("demo.noop", collection="bad")
    atf.schedule("demo.noop", collection="good")
    bad, good = claim(messages(enqueue_due("demo.noop", now)), now)
    # When an operator closes the gate of its lambda or collection before it starts
    until = None if until_s is None else now + timedelta(seconds=until_s)
    if target == "lambda":
        Lambda.objects.filter(name="demo.noop").update(gate=state, gate_until=until)
    else:
        Collection.objects.filter(name="bad").update(gate=state, gate_until=until)
    started = store.start_many([bad, good], now=now)
    # Then it does not start: paused, it waits as `new` again with no attempt counted, due for
    # the consumer once the gate opens; dropped, it ended `dropped`
    row = entity(bad.task_id)
    assert (row.status, row.attempts) == (expected, 1 if expected == TaskStatus.PROCESSING else 0)
    assert started[0] is (expected == TaskStatus.PROCESSING)
    if expected == TaskStatus.NEW:
        assert (row.assoc.status, row.assoc.next_trigger_at, row.worker) == (
            AssocStatus.NEW, now, "")
    if expected == TaskStatus.DROPPED:
        assert row.assoc.status == AssocStatus.COMPLETED and row.last_error["type"] == "Dropped"
    # ...and the other task is stopped only by its lambda's gate
    assert started[1] is (target == "collection" or expected == TaskStatus.PROCESSING)


def claim_started(msgs: list[Message], now: datetime) -> list[store.ClaimedTask]:
    lambda_ids = Lambda.objects.values_list("pk", flat=True)
    return store.claim(msgs, worker="w1", lambda_ids=list(lambda_ids), now=now, start=True)


def test_a_claim_for_idle_executors_starts_its_tasks_in_the_same_step(now: datetime) -> None:
    # Given two enqueued tasks, one with a message that went stale
    first = atf.schedule("demo.noop", max_attempts=4)
    second = atf.schedule("demo.noop")
    msgs = messages(enqueue_due("demo.noop", now))
    stale = Message(task_id=msgs[1].task_id, lease=msgs[1].lease - 1)
    # When a worker claims them with `start`
    (claimed,) = claim_started([msgs[0], stale], now)
    # Then the current one is processing: new lease, one attempt counted, heartbeat due, and
    # its claimed task is its first attempt
    row = entity(first.pk)
    assert (row.status, row.attempts, row.worker, row.lease) == (
        TaskStatus.PROCESSING, 1, "w1", msgs[0].lease + 1)
    assert (row.claimed_at, row.started_at, row.heartbeat_at) == (now, now, now)
    heartbeat_s = directory.by_name("demo.noop").heartbeat_timeout_s
    assert (row.assoc.status, row.assoc.next_trigger_at) == (
        AssocStatus.STARTED, now + timedelta(seconds=heartbeat_s))
    assert (claimed.task_id, claimed.lease, claimed.attempt, claimed.max_attempts) == (
        first.pk, row.lease, 1, 4)
    # ...and the stale message claimed nothing
    assert entity(second.pk).status == TaskStatus.ENQUEUED
    # And its result is recorded like any started task's
    assert store.finish(claimed, success(), now=now) == TaskStatus.SUCCESS


@pytest.mark.parametrize(("state", "expected"), [
    ("paused", TaskStatus.NEW), ("dropped", TaskStatus.DROPPED)])
def test_a_closed_gate_stops_a_claim_that_starts(now: datetime, state: str,
                                                 expected: TaskStatus) -> None:
    # Given a task of collection "bad" enqueued beside another
    atf.schedule("demo.noop", collection="bad")
    good = atf.schedule("demo.noop", collection="good")
    msgs = messages(enqueue_due("demo.noop", now))
    # When its collection's gate closes before a worker claims it with `start`
    Collection.objects.filter(name="bad").update(gate=state)
    claimed = claim_started(msgs, now)
    # Then only the other one is claimed; paused, it is `new` and due, no attempt counted;
    # dropped, it ended `dropped`
    assert [task.task_id for task in claimed] == [good.pk]
    (bad,) = TaskEntity.objects.filter(collection="bad").select_related("assoc")
    assert (bad.status, bad.attempts) == (expected, 0)
    assert bad.assoc.status == (AssocStatus.NEW if state == "paused" else AssocStatus.COMPLETED)


def test_release_hands_a_started_task_back_without_counting_its_attempt(
        now: datetime) -> None:
    # Given a task claimed and started at once, whose lambda its worker never ran
    task = atf.schedule("demo.noop")
    claimed = claim_started(messages(enqueue_due("demo.noop", now)), now)
    # When the stopping worker hands it back
    assert store.release(claimed, now=now) == 1
    # Then it is due again at once, its attempt uncounted
    row = entity(task.pk)
    assert (row.status, row.attempts, row.worker) == (TaskStatus.NEW, 0, "")
    assert (row.assoc.status, row.assoc.next_trigger_at) == (AssocStatus.NEW, now)


def test_payload_size_limit(settings: object) -> None:
    settings.ATF_MAX_PAYLOAD_BYTES = 100
    atf.schedule("demo.noop", {"s": "x" * 80})
    with pytest.raises(InvalidTask) as caught:
        atf.schedule("demo.noop", {"s": "x" * 100})
    assert "limit is 100" in caught.value.errors["payload"][0]


def test_an_idempotency_key_returns_the_first_task() -> None:
    first, created = scheduling.schedule(
        scheduling.TaskRequest("demo.noop", {"a": 1}, idempotency_key="order-7"))
    again, created_again = scheduling.schedule(
        scheduling.TaskRequest("demo.noop", {"a": 2}, idempotency_key="order-7"))
    assert (created, created_again, again.pk, again.payload) == (True, False, first.pk, {"a": 1})
    # The key is per lambda: another lambda may use it too
    other = atf.schedule("demo.sleep", {"seconds": 0}, idempotency_key="order-7")
    assert other.pk != first.pk


def test_a_task_makes_the_collection_row_it_names() -> None:
    atf.schedule("demo.noop", collection="first")
    atf.schedule_many([{"lambda": "demo.noop", "collection": name}
                       for name in ("first", "second", "second")])
    names = Collection.objects.filter(lambda_ref__name="demo.noop").values_list("name", flat=True)
    assert sorted(names) == ["first", "second"]


@pytest.mark.django_db(transaction=True)
def test_a_rolled_back_schedule_takes_its_new_collection_with_it() -> None:
    """The collection a rolled-back task made is not remembered as existing: the next task
    naming it makes the row again."""
    with pytest.raises(RuntimeError), transaction.atomic():
        atf.schedule("demo.noop", collection="fresh")
        assert Collection.objects.filter(name="fresh").exists()
        raise RuntimeError("the caller rolls back")
    assert not Collection.objects.filter(name="fresh").exists()
    atf.schedule("demo.noop", collection="fresh")
    atf.schedule("demo.noop", collection="fresh")
    assert Collection.objects.filter(name="fresh").count() == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.pooled
def test_twenty_concurrent_schedules_with_one_key_create_one_task() -> None:
    ids: list[int] = []

    def schedule() -> None:
        ids.append(atf.schedule("demo.noop", idempotency_key="same").pk)

    race(*[schedule] * 20)
    assert len(ids) == 20 and len(set(ids)) == 1
    assert TaskEntity.objects.count() == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.pooled
def test_schedule_rolls_back_with_the_callers_transaction() -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        atf.schedule("demo.noop", {"order": 1})
        raise RuntimeError("the order failed")
    assert TaskEntity.objects.count() == 0
    assert TaskAssoc.objects.count() == 0
    with transaction.atomic():
        atf.schedule("demo.noop", {"order": 2})
    assert list(TaskEntity.objects.values_list("payload", flat=True)) == [{"order": 2}]


def test_schedule_many_is_all_or_nothing(settings: object) -> None:
    with pytest.raises(InvalidTask) as caught:
        atf.schedule_many([{"lambda": "demo.noop"}, {"lambda": "demo.noop", "priority": "x"}])
    assert list(caught.value.errors) == ["tasks[1].priority"]
    assert TaskEntity.objects.count() == 0
    tasks = atf.schedule_many([{"lambda": "demo.noop", "payload": {"i": i}} for i in range(50)])
    assert len({t.pk for t in tasks}) == 50
    assert TaskAssoc.objects.filter(status=AssocStatus.NEW).count() == 50
    settings.ATF_MAX_BATCH_SIZE = 10
    with pytest.raises(InvalidTask):
        atf.schedule_many([{"lambda": "demo.noop"}] * 11)


# --- races ----------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.pooled
def test_racing_claims_of_the_same_messages_have_exactly_one_winner() -> None:
    # Given 200 enqueued tasks whose messages reached four controllers at once
    atf.schedule_many([{"lambda": "demo.noop"} for _ in range(200)])
    msgs = messages(enqueue_due("demo.noop", timezone.now()))
    wins: Counter[int] = Counter()
    lock = threading.Lock()

    def controller(name: str) -> None:
        for start in range(0, len(msgs), 20):
            claimed = claim(msgs[start:start + 20], timezone.now(), worker=name)
            with lock:
                wins.update(c.task_id for c in claimed)

    race(*(functools.partial(controller, f"w{i}") for i in range(4)))
    # Then every task was claimed exactly once
    assert len(wins) == 200
    assert set(wins.values()) == {1}
    assert TaskEntity.objects.filter(status="claimed").count() == 200


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("step", ["claim", "finish"])
def test_a_guarded_write_that_waited_for_the_row_checks_its_guard_again(step: str) -> None:
    """A claim (a second copy of the message) or a finish (a result delivered twice) that
    reads the task before the first one commits, and waits for that row's lock, writes
    nothing once the first commits: the guard holds on the row's newest version, not on what
    the statement read when it began (neither takes a lock before its UPDATE)."""
    if not ON_POSTGRES:
        pytest.skip("waits on a row lock, seen in pg_stat_activity")
    if step == "claim":
        atf.schedule("demo.noop")
        msgs = messages(enqueue_due("demo.noop", timezone.now()))
    else:
        held = running_many(1)
    now = timezone.now()
    first = threading.Event()
    commit = threading.Event()
    second: list[object] = []

    def write(worker: str) -> Sequence[object]:
        if step == "claim":
            return claim(msgs, now, worker=worker)
        return list(store.finish_many([(held[0], success())], now=now))

    def the_first() -> None:
        with transaction.atomic():
            assert write("w1") not in ([], [None])
            first.set()
            commit.wait(30)

    def the_second() -> None:
        first.wait(30)
        second.extend(write("w2"))

    def let_the_first_commit() -> None:
        first.wait(30)
        wait_for(write_waits_on_a_lock, message="the second write waiting on the row")
        commit.set()

    race(the_first, the_second, let_the_first_commit)
    task = TaskEntity.objects.get()
    if step == "claim":
        assert second == [] and (task.status, task.worker) == ("claimed", "w1")
    else:
        assert second == [None] and task.status == "success"
        assert history(task.pk) == [(1, "success")]


def test_a_batch_of_starts_starts_only_the_tasks_whose_lease_is_current(now: datetime) -> None:
    # Given two claimed tasks, one of them handed back and enqueued again since
    atf.schedule_many([{"lambda": "demo.noop"}, {"lambda": "demo.noop"}])
    handed_back, kept = claim(messages(enqueue_due("demo.noop", now)), now)
    store.release([handed_back], now=now)
    enqueue_due("demo.noop", now)
    # When one batch starts both with the leases the controller holds
    started = store.start_many([handed_back, kept], now=now)
    # Then only the task whose lease is still current starts
    assert started == [False, True]
    assert (entity(handed_back.task_id).status, entity(handed_back.task_id).attempts) == (
        "enqueued", 0)
    assert (entity(kept.task_id).status, entity(kept.task_id).attempts) == ("processing", 1)


def test_a_batch_of_results_records_only_the_tasks_whose_lease_is_current(now: datetime) -> None:
    # Given two running tasks; only the second heartbeats, so the first one's lease expires
    lost, alive = running(now), running(now)
    assert store.heartbeat({alive.task_id: alive.lease}, now=now + timedelta(seconds=20)) == set()
    assert enqueue_due("demo.noop", now + timedelta(seconds=40)).reenqueued == {"processing": 1}
    # When one batch records both results
    statuses = store.finish_many([(lost, success()), (alive, success())],
                                 now=now + timedelta(seconds=41))
    # Then the stale one is refused and changes nothing; the current one is recorded
    assert statuses == [None, TaskStatus.SUCCESS]
    assert (entity(lost.task_id).status, entity(lost.task_id).result) == ("enqueued", None)
    assert (entity(alive.task_id).status, entity(alive.task_id).result) == ("success", {"ok": True})
    assert list(TaskAttempt.objects.filter(task_id=lost.task_id).values_list(
        "outcome", flat=True)) == ["lost"]


def test_results_and_a_claim_are_one_transaction(now: datetime, backend: StoreBackend,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a running task, and a task with its message ready
    done = running(now)
    atf.schedule("demo.noop")
    msgs = messages(enqueue_due("demo.noop", now))
    lambda_ids = list(Lambda.objects.values_list("pk", flat=True))
    # When a claim that carries the running task's result fails after the result was written
    real = backend.claim_and_start

    def broken(*args: object, **kwargs: object) -> object:
        raise RuntimeError("the claim failed")

    monkeypatch.setattr(backend, "claim_and_start", broken)
    with pytest.raises(RuntimeError):
        store.finish_and_claim([(done, success())], msgs, worker="w1", lambda_ids=lambda_ids,
                               now=now, start=True)
    # Then the result was not written either
    assert entity(done.task_id).status == TaskStatus.PROCESSING
    assert not TaskAttempt.objects.filter(task_id=done.task_id).exists()
    # And when it succeeds, the result is recorded and the next task claimed and started
    monkeypatch.setattr(backend, "claim_and_start", real)
    statuses, (claimed,) = store.finish_and_claim([(done, success())], msgs, worker="w1",
                                                  lambda_ids=lambda_ids, now=now, start=True)
    assert statuses == [TaskStatus.SUCCESS]
    assert (entity(done.task_id).status, entity(claimed.task_id).status) == (
        TaskStatus.SUCCESS, TaskStatus.PROCESSING)


def running_many(count: int) -> list[store.ClaimedTask]:
    """`count` demo.noop tasks taken to processing now."""
    atf.schedule_many([{"lambda": "demo.noop"} for _ in range(count)])
    now = timezone.now()
    claimed = claim(messages(enqueue_due("demo.noop", now)), now)
    assert len(claimed) == count
    assert all(store.start_many(claimed, now=now))
    return claimed


def drain(now: datetime, pushed: list[Message]) -> None:
    """The consumer's passes at `now`, ten rows at a time, until nothing is due."""
    while batch := enqueue_due("demo.noop", now, limit=10):
        if not batch.messages and not batch.dead:
            return
        pushed += messages(batch)


@pytest.mark.django_db(transaction=True)
@pytest.mark.pooled
def test_a_claim_racing_the_consumer_claims_every_task_once_and_keeps_its_claim(
        ) -> None:
    # Given 100 enqueued tasks whose enqueue timeout (60 s) has just expired
    atf.schedule_many([{"lambda": "demo.noop"} for _ in range(100)])
    start = timezone.now()
    msgs = messages(enqueue_due("demo.noop", start))
    assert len(msgs) == 100
    late = start + timedelta(seconds=61)
    claimed: list[store.ClaimedTask] = []
    pushed: list[Message] = []

    def controller() -> None:  # from the other end of the id range than the consumer
        for i in range(len(msgs), 0, -5):
            claimed.extend(claim(msgs[i - 5:i], late))

    # When a controller claims their messages while the consumer enqueues them again
    race(controller, lambda: drain(late, pushed))
    # Then each is claimed exactly once (an expired enqueued task keeps its lease)...
    assert sorted(c.task_id for c in claimed) == sorted(m.task_id for m in msgs)
    # ...and every claim stands: claimed, with the claim timeout as its trigger
    rows = TaskAssoc.objects.filter(task__status="claimed")
    assert rows.count() == 100
    assert set(rows.values_list("next_trigger_at", flat=True)) == {late + timedelta(seconds=30)}


@pytest.mark.django_db(transaction=True)
@pytest.mark.pooled
def test_results_racing_the_consumer_are_recorded_or_refused_never_both() -> None:
    # Given 60 running tasks whose heartbeat timeout (30 s) has just expired
    tasks = running_many(60)
    start = timezone.now()
    late = start + timedelta(seconds=31)
    statuses: dict[int, TaskStatus | None] = {}
    pushed: list[Message] = []

    def executor() -> None:  # from the other end of the id range than the consumer
        for i in range(len(tasks), 0, -5):
            chunk = tasks[i - 5:i]
            results = store.finish_many([(t, success()) for t in chunk], now=late)
            statuses.update(zip((t.task_id for t in chunk), results, strict=True))

    # When their executors report success while the consumer enqueues them again
    race(executor, lambda: drain(late, pushed))
    # Then each task either has its result, or was enqueued again with its attempt lost
    recorded = {pk for pk, status in statuses.items() if status is TaskStatus.SUCCESS}
    refused = {pk for pk, status in statuses.items() if status is None}
    assert recorded | refused == {t.task_id for t in tasks}
    assert refused == {m.task_id for m in pushed}
    assert set(TaskEntity.objects.filter(status="success").values_list("pk", flat=True)) == (
        recorded)
    assert set(TaskEntity.objects.filter(status="enqueued").values_list("pk", flat=True)) == (
        refused)
    outcomes = {pk: [outcome for _number, outcome in history(pk)] for pk in recorded | refused}
    assert outcomes == {pk: ["success"] if pk in recorded else ["lost"] for pk in outcomes}


@pytest.mark.django_db(transaction=True)
@pytest.mark.pooled
def test_heartbeats_racing_the_consumer_lose_exactly_the_tasks_enqueued_again() -> None:
    # Given 60 running tasks whose heartbeat timeout (30 s) has just expired
    tasks = running_many(60)
    start = timezone.now()
    late = start + timedelta(seconds=31)
    lost: set[int] = set()
    pushed: list[Message] = []

    def heartbeats() -> None:  # from the other end of the id range than the consumer
        for i in range(len(tasks), 0, -5):
            lost.update(store.heartbeat({t.task_id: t.lease for t in tasks[i - 5:i]}, now=late))

    # When their heartbeats come in while the consumer enqueues them again
    race(heartbeats, lambda: drain(late, pushed))
    # Then the heartbeat lost exactly the tasks the consumer took; the others run on, renewed
    assert lost == {m.task_id for m in pushed}
    alive = TaskEntity.objects.filter(status="processing").select_related("assoc")
    assert {row.pk for row in alive} == {t.task_id for t in tasks} - lost
    assert {row.assoc.next_trigger_at for row in alive} <= {late + timedelta(seconds=30)}


def test_a_claim_and_a_finish_reach_their_rows_by_primary_key_whatever_the_statistics_say(
        backend: StoreBackend, now: datetime, monkeypatch: pytest.MonkeyPatch) -> None:
    """The statistics of a partial status index lag behind a backlog that fills it (ANALYZE
    saw it empty): a claim that let the planner reach its rows through task_in_queue read
    the whole queue for each claimed task (3,009 rows a task with 110,000 waiting), a finish
    through task_held every task in flight. Each row is locked by its primary key instead."""
    if type(backend).__name__ != "PostgresBackend":
        pytest.skip("the plans of the PostgreSQL backend's own statements")
    from tasks_core.store.backends import postgres

    for _ in range(3):
        atf.schedule_many([{"lambda": "demo.noop"}] * 500)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE tasks_core_taskentity")  # no task enqueued, none in flight
    taken = messages(enqueue_due("demo.noop", now, limit=1500))
    ran: list[tuple[str, object]] = []
    execute = postgres._execute
    monkeypatch.setattr(postgres, "_execute", lambda sql, params, *, prepare: (
        ran.append((sql, params)), execute(sql, params, prepare=prepare))[1])
    claimed = store.claim(taken[:10], worker="w1", lambda_ids=[directory.by_name("demo.noop").id],
                          now=now, start=True)
    store.finish_many([(task, success()) for task in claimed], now=now)
    assert len(claimed) == 10 and len(ran) == 2
    with connection.cursor() as cursor:
        for sql, params in ran:
            cursor.execute(f"EXPLAIN {sql}", params)
            plan = "\n".join(row[0] for row in cursor.fetchall())
            assert "task_in_queue" not in plan and "task_held" not in plan, plan
            assert "tasks_core_taskentity_pkey" in plan, plan  # an index or bitmap scan


def test_a_lambda_that_has_tasks_is_not_deleted_and_a_deleted_task_takes_its_attempts(
        now: datetime) -> None:
    """The three foreign keys without a database constraint (migration 0032) keep their
    guarantees in the ORM: PROTECT on the lambda, CASCADE from a task to its attempts."""
    from django.db.models import ProtectedError

    claimed = running(now)
    store.finish(claimed, failure(), now=now)
    assert TaskAttempt.objects.filter(task_id=claimed.task_id).count() == 1
    with pytest.raises(ProtectedError):
        Lambda.objects.get(name="demo.noop").delete()
    TaskEntity.objects.get(pk=claimed.task_id).delete()
    assert not TaskAttempt.objects.filter(task_id=claimed.task_id).exists()
    assert not TaskAssoc.objects.filter(task_id=claimed.task_id).exists()


@pytest.mark.django_db(transaction=True)
def test_scheduling_takes_no_lock_on_its_lambdas_row(backend: StoreBackend) -> None:
    """A foreign key's check locked the lambda's row (FOR KEY SHARE) in every transaction that
    inserted one of its tasks: a WAL record each, and a multixact shared by every producer."""
    if not ON_POSTGRES:
        pytest.skip("PostgreSQL's row locks")
    import psycopg

    lambda_id = directory.by_name("demo.noop").id
    atf.schedule("demo.noop")  # its collection's row made and committed (its check locks it)
    with transaction.atomic():
        with connection.cursor() as cursor:  # checks at the insert, not at the commit
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        atf.schedule("demo.noop")  # this transaction stays open, with its locks
        with psycopg.connect(**connection.get_connection_params(), autocommit=True) as other:
            # Fails (LockNotAvailable) while the open transaction holds a lock on the row.
            other.execute("SELECT 1 FROM tasks_core_lambda WHERE id = %s FOR UPDATE NOWAIT",
                          [lambda_id])
