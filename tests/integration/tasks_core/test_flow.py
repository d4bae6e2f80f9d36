"""Flow control in the store: concurrency and rate limits per lambda and per limit key, held at
the claim that starts a task; a finish releases the next held task; debounce at scheduling.

Runs against each store backend like tests/integration/tasks_core/test_store.py (and on SQLite
in the smoke run: marked `sqlite`).
"""

from __future__ import annotations

import functools
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from tasks_core import atf, directory, flow, scheduling, wakeup
from tasks_core.access import EVERY_TEAM
from tasks_core.exceptions import InvalidTask
from tasks_core.models import FlowStart, Lambda, TaskEntity
from tasks_core.operations import set_options
from tasks_core.store import backends
from tasks_core.store.backends import postgres
from tests.conftest import race
from tests.integration.tasks_core.test_store import (  # noqa: F401 - `backend` is a fixture
    backend,
    entity,
    success,
)
from tests.store_steps import enqueue_due, messages

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]


@pytest.fixture
def now() -> datetime:
    return timezone.now() + timedelta(seconds=1)


def limit(lambda_name: str = "demo.noop", **options: Any) -> None:
    """Set flow options of a lambda as an operator would, and drop the cached rows."""
    set_options(EVERY_TEAM, lambda_name, options, by="test")
    directory.clear()


def claim_start(now: datetime, *, lambda_name: str = "demo.noop", worker: str = "w1"):
    from tasks_core import store

    batch = enqueue_due(lambda_name, now)
    lambda_ids = list(Lambda.objects.values_list("pk", flat=True))
    return store.claim(messages(batch), worker=worker, lambda_ids=lambda_ids, now=now,
                       start=True)


def held(now: datetime) -> list[TaskEntity]:
    return list(TaskEntity.objects.select_related("assoc")
                .filter(status="new", held_at__isnull=False).order_by("pk"))


# --- concurrency ------------------------------------------------------------------------------


def test_a_claim_starts_no_more_than_the_concurrency_and_holds_the_rest(now: datetime) -> None:
    # Given a lambda limited to 2 running, one task already running and 4 more due
    limit(concurrency=2)
    atf.schedule("demo.noop")
    (first,) = claim_start(now)
    atf.schedule_many([{"lambda": "demo.noop"} for _ in range(4)])
    # When a controller claims all 4 for idle executors
    started = claim_start(now)
    # Then one starts (two running in all); three are held: `new`, due again later, not now
    assert len(started) == 1
    assert TaskEntity.objects.filter(status="processing").count() == 2
    waiting = held(now)
    assert len(waiting) == 3
    assert all(t.assoc.status == "new" and t.assoc.next_trigger_at > now for t in waiting)
    assert enqueue_due("demo.noop", now).messages == []


def test_a_finish_releases_the_next_held_task_highest_priority_first_and_wakes_the_consumers(
        now: datetime, django_capture_on_commit_callbacks: Any) -> None:
    from tasks_core import store

    # Given concurrency 1: one running, and held tasks of low then high priority
    limit(concurrency=1)
    atf.schedule("demo.noop")
    (running,) = claim_start(now)
    low = atf.schedule("demo.noop", priority="low")
    high = atf.schedule("demo.noop", priority="high")
    assert claim_start(now) == []
    # When the running task finishes
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        store.finish(running, success(), now=now)
    # Then the high-priority task is due now, the low one still held, and the consumers woken
    assert entity(high.pk).assoc.next_trigger_at == now
    assert entity(low.pk).assoc.next_trigger_at > now
    assert wakeup.notify in callbacks
    (started,) = claim_start(now)
    assert started.task_id == high.pk


def test_a_finish_beside_a_claim_releases_where_tasks_wait_never_what_that_claim_held(
        now: datetime) -> None:
    """A worker's finishes and its next claim share a transaction; the claim's admission
    comes first and reads, under its lock, which limited lambdas hold tasks back. A finish
    then releases a held task of those only (no statement for the others), and never one the
    same claim has just held: no slot was free for it."""
    from tasks_core import store

    def finish_and_claim(running: store.ClaimedTask) -> list[store.ClaimedTask]:
        return store.finish_and_claim(
            [(running, success())], messages(enqueue_due("demo.noop", now)), worker="w1",
            lambda_ids=[directory.by_name("demo.noop").id], now=now, start=True)[1]

    # Given concurrency 1: one task running, another enqueued, none held
    limit(concurrency=1)
    atf.schedule("demo.noop")
    (running,) = claim_start(now)
    atf.schedule("demo.noop")
    # When the running one finishes and the other is claimed in the same transaction
    with counted() as sent:
        (running,) = finish_and_claim(running)
    # Then no statement looked for a held task to release
    if connection.vendor == "postgresql":
        assert not any("WITH finished AS" in sql for sql in sent), sent
    # Given a task held back (low priority), then a default and a high one enqueued
    waiting = atf.schedule("demo.noop", priority="low")
    assert claim_start(now) == []
    default = atf.schedule("demo.noop")
    high = atf.schedule("demo.noop", priority="high")
    # When the running one finishes beside the claim of both
    (started,) = finish_and_claim(running)
    # Then the high one starts; the default one is held until its recheck (the claim held it:
    # no slot for it), and the slot goes to the task that waited before: due now
    assert started.task_id == high.pk
    assert entity(default.pk).assoc.next_trigger_at > now
    assert entity(waiting.pk).assoc.next_trigger_at == now
    assert [task.pk for task in held(now)] == [default.pk]


def test_finishes_one_after_another_release_different_held_tasks(now: datetime) -> None:
    from tasks_core import store

    # Given concurrency 2: two running and three held
    limit(concurrency=2)
    atf.schedule_many([{"lambda": "demo.noop"} for _ in range(5)])
    first, second = claim_start(now)
    # When both finish, each in its own transaction, before the consumer enqueues anything
    store.finish(first, success(), now=now)
    store.finish(second, success(), now=now)
    # Then two different tasks are due now (a slot each), and one is still held
    due = [t.pk for t in TaskEntity.objects.filter(status="new", assoc__next_trigger_at=now)]
    assert len(due) == 2
    assert len(held(now)) == 1


def test_a_lapsed_lease_the_consumer_ends_releases_its_slot_at_once(
        now: datetime, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given concurrency 1: a task on its last attempt running, another held (its recheck an
    # hour away, longer than the heartbeat timeout)
    monkeypatch.setattr(flow, "HOLD_RECHECK_S", 3600.0)
    limit(concurrency=1)
    lost, waiting = atf.schedule_many([{"lambda": "demo.noop", "max_attempts": 1},
                                       {"lambda": "demo.noop"}])
    assert [c.task_id for c in claim_start(now)] == [lost.pk]
    # When its worker goes silent and the consumer finds its heartbeat timeout passed
    lapsed = now + timedelta(seconds=directory.by_name("demo.noop").heartbeat_timeout_s + 1)
    enqueue_due("demo.noop", lapsed)
    # Then it is dead, and the held task is due at once (not at its recheck)
    assert entity(lost.pk).status == "dead"
    assert entity(waiting.pk).assoc.next_trigger_at == lapsed
    assert [m.task_id for m in messages(enqueue_due("demo.noop", lapsed))] == [waiting.pk]


def test_a_held_task_is_tried_again_after_the_recheck_should_no_finish_release_it(
        now: datetime) -> None:
    limit(concurrency=1)
    atf.schedule_many([{"lambda": "demo.noop"}, {"lambda": "demo.noop"}])
    claim_start(now)
    (waiting,) = held(now)
    later = now + timedelta(seconds=flow.HOLD_RECHECK_S)
    assert waiting.assoc.next_trigger_at == later
    assert waiting.pk in [m.task_id for m in messages(enqueue_due("demo.noop", later))]


def test_a_paused_lambda_starts_nothing_whatever_its_limits(now: datetime) -> None:
    limit(concurrency=5)
    atf.schedule_many([{"lambda": "demo.noop"} for _ in range(3)])
    batch = enqueue_due("demo.noop", now)
    scheduling.set_gate("demo.noop", "paused")
    from tasks_core import store

    lambda_ids = list(Lambda.objects.values_list("pk", flat=True))
    assert store.claim(messages(batch), worker="w1", lambda_ids=lambda_ids, now=now,
                       start=True) == []
    assert TaskEntity.objects.filter(status__in=["claimed", "processing"]).count() == 0


@pytest.mark.django_db(transaction=True)
def test_racing_claims_across_controllers_never_run_more_than_the_concurrency() -> None:
    from tasks_core import store

    # Given concurrency 3 and 60 enqueued tasks whose messages reach four controllers at once
    limit(concurrency=3)
    atf.schedule_many([{"lambda": "demo.noop"} for _ in range(60)])
    msgs = messages(enqueue_due("demo.noop", timezone.now() + timedelta(seconds=1)))
    lambda_ids = list(Lambda.objects.values_list("pk", flat=True))
    started: Counter[int] = Counter()
    lock = threading.Lock()

    def controller(name: str) -> None:
        for first in range(0, len(msgs), 5):
            claimed = store.claim(msgs[first:first + 5], worker=name, lambda_ids=lambda_ids,
                                  now=timezone.now(), start=True)
            with lock:
                started.update(c.task_id for c in claimed)

    race(*(functools.partial(controller, f"w{i}") for i in range(4)))
    # Then exactly 3 started, and the rest wait
    assert sum(started.values()) == 3
    assert TaskEntity.objects.filter(status="processing").count() == 3
    assert TaskEntity.objects.filter(status="new", held_at__isnull=False).count() == 57


def _entity_scans(sql: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    """The nodes of `sql`'s plan that read the task table, as it ran (EXPLAIN ANALYZE)."""
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", params)
        ((plan,),) = cursor.fetchall()
    found, nodes = [], [plan[0]["Plan"]]
    while nodes:
        node = nodes.pop()
        nodes += node.get("Plans", [])
        if node.get("Relation Name") == TaskEntity._meta.db_table:
            found.append(node)
    return found


@pytest.mark.parametrize("keyed", [False, True], ids=["concurrency", "key_concurrency"])
def test_a_limited_claim_reads_what_runs_and_its_own_tasks_not_the_lambdas_history(
        keyed: bool) -> None:
    """Every claim of a limited lambda counts what runs under the lambda's lock. With the
    running statuses as `= ANY`, the index range was every task of the lambda, history
    included (a filter then threw the finished ones away): 12M stored tasks, 12M entries a
    claim. And with statistics that lag behind, the claim's own tasks were found by scanning
    the lambda's, not by primary key."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's plans")
    from tasks_core import store

    # Given a task table as a drain starts on it (emptied, statistics not gathered since), then
    # 1,000 tasks of a limited lambda that ran and finished, and 2 that run
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {TaskEntity._meta.db_table} CASCADE")
    limit(**{"key_concurrency" if keyed else "concurrency": 1_000_000})
    for _ in range(2):
        atf.schedule_many([{"lambda": "demo.noop", "limit_key": "k"} for _ in range(501)])
    now = timezone.now() + timedelta(seconds=1)
    started = claim_start(now)
    store.finish_many([(task, success()) for task in started[2:]], now=now)
    lambda_id = directory.by_name("demo.noop").id
    # When a claim counts what runs (and, lambda-wide, reads its own tasks in one statement)
    if keyed:
        counts = [(flow._RUNNING_BY_KEY_UP_TO_LIMIT, {
            "lambdas": [lambda_id], "keys": ["k"], "most": [1_000_000],
            **flow._RUNNING_STATUSES})]
    else:
        counts = [(flow._CANDIDATES_AND_RUNNING, {
            "ids": [started[0].task_id], "limited": [lambda_id], "counting": [lambda_id],
            "most": [1_000_000], "new": "new", **flow._RUNNING_STATUSES})]
    # Then it reads the tasks that run and its own, not the 1,000 that finished
    for sql, params in counts:
        scans = _entity_scans(sql, params)
        assert sum(scan.get("Rows Removed by Filter", 0) for scan in scans) == 0, scans
    # And each counts the 2 that run, and stops at the limit
    counted = (flow._running_by_key({(lambda_id, "k"): 1_000_000}) if keyed
               else flow._running({lambda_id: 1_000_000}))
    capped = (flow._running_by_key({(lambda_id, "k"): 1}) if keyed
              else flow._running({lambda_id: 1}))
    assert list(counted.values()) == [2] and list(capped.values()) == [1]


# --- keys ---------------------------------------------------------------------------------------


def test_key_concurrency_holds_only_the_busy_key(now: datetime) -> None:
    # Given one task per key allowed, two tasks of key a and one each of b and c (and one
    # without a key, which no keyed limit counts)
    limit(key_concurrency=1)
    tasks = atf.schedule_many([{"lambda": "demo.noop", "limit_key": key}
                               for key in ("a", "a", "b", "c", None)])
    # When they are claimed together
    started = {c.task_id for c in claim_start(now)}
    # Then only the second of a waits: no other key is held back by it
    assert started == {tasks[0].pk, tasks[2].pk, tasks[3].pk, tasks[4].pk}
    assert [t.pk for t in held(now)] == [tasks[1].pk]


def test_a_finish_releases_a_held_task_of_its_own_key(now: datetime) -> None:
    from tasks_core import store

    limit(key_concurrency=1)
    first, _other, second = atf.schedule_many(
        [{"lambda": "demo.noop", "limit_key": key} for key in ("a", "b", "a")])
    running = {c.task_id: c for c in claim_start(now)}
    store.finish(running[first.pk], success(), now=now)
    assert entity(second.pk).assoc.next_trigger_at == now
    assert [c.task_id for c in claim_start(now)] == [second.pk]


# --- rates --------------------------------------------------------------------------------------


def test_a_rate_starts_at_most_n_in_its_window_and_holds_the_rest_until_it_has_room(
        now: datetime) -> None:
    # Given 3 starts a second and 5 due tasks
    limit(rate="3/s")
    atf.schedule_many([{"lambda": "demo.noop"} for _ in range(5)])
    # When they are claimed at once
    assert len(claim_start(now)) == 3
    # Then the other two are due when the first starts leave the window, one second later
    waiting = held(now)
    assert [t.assoc.next_trigger_at for t in waiting] == [now + timedelta(seconds=1)] * 2
    # ...and nothing more starts within that second, even once they are enqueued again
    assert claim_start(now + timedelta(seconds=0.5)) == []
    assert len(claim_start(now + timedelta(seconds=1))) == 2
    # ...each start logged (the log is pruned by the database's clock, a second behind)
    assert FlowStart.objects.count() == 5


def test_a_key_rate_limits_each_key_apart(now: datetime) -> None:
    limit(key_rate="1/m")
    tasks = atf.schedule_many([{"lambda": "demo.noop", "limit_key": key}
                               for key in ("a", "a", "b")])
    assert {c.task_id for c in claim_start(now)} == {tasks[0].pk, tasks[2].pk}
    (waiting,) = held(now)
    assert (waiting.pk, waiting.assoc.next_trigger_at) == (tasks[1].pk,
                                                           now + timedelta(seconds=60))


def test_starts_no_window_counts_are_pruned_in_bounded_batches_whatever_their_key() -> None:
    from tasks_core import flow_starts

    # Given starts of a lambda with rates and of one without (any more): of keys that never
    # start again, some older than the longest window a rate can have (an hour)
    limit(key_rate="1/m", rate="10/h")
    noop, sleep = (Lambda.objects.get(name=name) for name in ("demo.noop", "demo.sleep"))

    def start(lam: Lambda, key: str, seconds_ago: float) -> FlowStart:
        return FlowStart.objects.create(lambda_ref=lam, key=key,
                                        at=timezone.now() - timedelta(seconds=seconds_ago))

    kept = [start(noop, "a", 10), start(noop, "", 120), start(sleep, "x", 3500)]
    for lam, key, seconds_ago in ((noop, "a", 3700), (noop, "b", 7200), (noop, "", 7200),
                                  (sleep, "x", 4000)):
        start(lam, key, seconds_ago)
    # When pruning has time for one batch of 3, Then 3 go; the next round takes the last one
    assert flow_starts.prune(budget_s=0, batch_size=3) == 3
    assert flow_starts.prune(budget_s=0, batch_size=3) == 1
    # ...and what a window may still count stays
    assert set(FlowStart.objects.values_list("pk", flat=True)) == {row.pk for row in kept}
    assert flow_starts.prune(budget_s=None) == 0


# --- a lambda without limits pays nothing --------------------------------------------------------

#: Statements sent through a cursor by a controller's claim that starts one task, and by the
#: finish of that task, for a lambda without limits. Measured on main before flow control
#: (7b5cb6a) with this test's counting: PostgreSQL's batch backend claims and starts in one
#: statement (no transaction of its own) and finishes in one (in a transaction, whose BEGIN and
#: COMMIT no cursor sends); the ORM backend takes its steps in several (measured the same
#: way on SQLite too), two fewer to finish a success since it writes no attempt row.
STATEMENTS = {("postgresql", "PostgresBackend"): {"claim": 1, "finish": 1},
              ("postgresql", "OrmBackend"): {"claim": 9, "finish": 4},
              ("sqlite", "OrmBackend"): {"claim": 10, "finish": 5}}


@contextmanager
def counted() -> Iterator[list[str]]:
    """Every statement sent to the database: Django's cursors and the batch backend's own."""
    sent: list[str] = []
    run = postgres._execute

    def logged(sql: str, params: Any, *, prepare: bool) -> list[tuple]:
        sent.append(sql)
        return run(sql, params, prepare=prepare)

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        sent.append(sql)
        return execute(sql, params, many, context)

    postgres._execute = logged  # type: ignore[assignment]
    try:
        with connection.execute_wrapper(wrapper):
            yield sent
    finally:
        postgres._execute = run  # type: ignore[assignment]


@pytest.mark.django_db(transaction=True)
def test_a_claim_and_a_finish_of_a_lambda_without_limits_send_no_more_statements(
        queue: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from tasks_core import store
    from tasks_core.claiming import Claimer

    # Given a worker of two lambdas, one of them with limits, as its controller claims
    limit("demo.sleep", concurrency=1, rate="5/s")
    lambda_ids = dict(Lambda.objects.filter(name__in=["demo.noop", "demo.sleep"])
                      .values_list("name", "pk"))
    for pk in lambda_ids.values():
        directory.by_id(pk)  # the cache a running worker has warm
    claimer = Claimer(queue=queue, worker_id="w1", lambda_ids=lambda_ids,
                      priorities=["high", "default", "low"], start=True)

    def measure() -> dict[str, int]:
        atf.schedule("demo.noop")
        batch = enqueue_due("demo.noop", timezone.now() + timedelta(seconds=1))
        queue.push(queue.queue_name("demo.noop", "default"), messages(batch))
        with counted() as claim_sent:
            (task,) = claimer.take(10, wait_s=0)
        with counted() as finish_sent:
            store.finish(task, success(), now=timezone.now())
        return {"claim": len(claim_sent), "finish": len(finish_sent)}

    # When a task of the lambda without limits is claimed, started and finished
    with_flow = measure()
    # Then it costs as many statements as with flow control taken out altogether, as many as
    # before flow control
    monkeypatch.setattr(flow, "limited", lambda lambda_ids: {})
    monkeypatch.setattr(flow, "release", lambda finished, now, admission=None: None)
    without = measure()
    assert with_flow == without == STATEMENTS[connection.vendor,
                                              type(backends.current()).__name__]


# --- debounce -----------------------------------------------------------------------------------


def test_a_debounced_schedule_replaces_the_waiting_task_and_moves_its_due_time(
        now: datetime) -> None:
    first = atf.schedule("demo.noop", {"n": 1}, debounce=2, debounce_key="k")
    second = atf.schedule("demo.noop", {"n": 2}, debounce=5, debounce_key="k")
    other = atf.schedule("demo.noop", {"n": 3}, debounce=2, debounce_key="other")
    assert second.pk == first.pk != other.pk
    row = entity(first.pk)
    assert row.payload == {"n": 2}
    assert row.assoc.next_trigger_at == row.run_at
    assert 4 < (row.run_at - timezone.now()).total_seconds() <= 5
    assert TaskEntity.objects.count() == 2


def test_a_debounced_task_enqueued_but_not_started_is_replaced_and_its_message_goes_stale(
        now: datetime) -> None:
    first = atf.schedule("demo.noop", {"n": 1}, debounce=0.001, debounce_key="k")
    stale = messages(enqueue_due("demo.noop", now))
    assert atf.schedule("demo.noop", {"n": 2}, debounce=1, debounce_key="k").pk == first.pk
    from tasks_core import store

    lambda_ids = list(Lambda.objects.values_list("pk", flat=True))
    assert store.claim(stale, worker="w1", lambda_ids=lambda_ids, now=now, start=True) == []
    assert entity(first.pk).status == "new"


def test_once_a_debounced_task_started_a_new_schedule_makes_a_new_task(now: datetime) -> None:
    first = atf.schedule("demo.noop", {"n": 1}, debounce=0.001, debounce_key="k")
    claim_start(now)
    assert entity(first.pk).status == "processing"
    again = atf.schedule("demo.noop", {"n": 2}, debounce=1, debounce_key="k")
    assert again.pk != first.pk


@pytest.mark.django_db(transaction=True)
def test_twenty_concurrent_debounced_schedules_of_one_key_make_one_task() -> None:
    ids: list[int] = []

    def schedule(n: int) -> None:
        ids.append(atf.schedule("demo.noop", {"n": n}, debounce=5, debounce_key="same").pk)

    race(*(functools.partial(schedule, n) for n in range(20)))
    assert len(ids) == 20 and len(set(ids)) == 1
    assert TaskEntity.objects.count() == 1


@pytest.mark.parametrize(("options", "field"), [
    ({"debounce": 2}, "debounce_key"),
    ({"debounce_key": "k"}, "debounce_key"),
    ({"debounce": 0, "debounce_key": "k"}, "debounce"),
    ({"debounce": 2, "debounce_key": "k", "delay": 3}, "debounce"),
    ({"debounce": 2, "debounce_key": "k", "idempotency_key": "i"}, "debounce"),
    ({"limit_key": ""}, "limit_key"),
    ({"limit_key": "x" * 201}, "limit_key"),
])
def test_bad_flow_fields_are_refused_by_name(options: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidTask) as caught:
        atf.schedule("demo.noop", **options)
    assert field in caught.value.errors


# --- operators ----------------------------------------------------------------------------------


def test_atf_lambda_sets_limits_and_refuses_a_bad_rate_in_one_line() -> None:
    from io import StringIO

    from django.core.management import CommandError, call_command

    out = StringIO()
    call_command("atf_lambda", "demo.noop", "--concurrency", "4", "--rate", "30/m", stdout=out)
    directory.clear()
    info = directory.by_name("demo.noop")
    assert (info.concurrency, info.rate_per_s) == (4, 0.5)
    assert "concurrency" in out.getvalue()
    with pytest.raises(CommandError, match="--rate fast"):
        call_command("atf_lambda", "demo.noop", "--rate", "fast")
