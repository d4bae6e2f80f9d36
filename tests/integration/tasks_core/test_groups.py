"""Groups with callbacks: `then` once after every member succeeded, with their results in
order; `on_failure` once when one did not; all or nothing with the caller's transaction; the
last members ending at once release `then` once; a plain task's finish costs no statement more.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
import redis
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tasks_core import atf, registry, store
from tasks_core.gating import Decision
from tasks_core.models import Lambda, TaskEntity, TaskGroup
from tasks_core.store import backends, guarded
from tasks_core.store.backends import postgres
from tasks_core.store.backends.orm import OrmBackend
from tests.conftest import race
from workers.testing import TaskOutcome

ECHO, COLLECT, FAILED = "groups.echo", "groups.collect", "groups.failed"
#: What each callback read of its parents' results, by task id.
SEEN: dict[int, list[Any]] = {}


def echo(ctx: atf.TaskContext, payload: Any) -> Any:
    if payload.get("fail"):
        raise atf.Fatal("asked to fail")
    return payload["n"]


def collect(ctx: atf.TaskContext, payload: Any) -> int:
    SEEN[ctx.task_id] = ctx.parent_results()
    return len(SEEN[ctx.task_id])


@pytest.fixture
def group_lambdas(redis_client: redis.Redis) -> Iterator[None]:
    registry.register(ECHO, team="groups")(echo)
    registry.register(COLLECT, team="groups")(collect)
    registry.register(FAILED, team="groups")(collect)
    SEEN.clear()
    yield
    for name in (ECHO, COLLECT, FAILED):
        registry.unregister(name)


@pytest.mark.django_db
def test_then_runs_once_after_every_member_with_their_results_in_order(
        group_lambdas: None, run_due_tasks: Callable[..., list[TaskOutcome]]) -> None:
    # Given a group of 1,000 members with a `then` and an `on_failure`
    group = atf.group([atf.call(ECHO, {"n": n}) for n in range(1000)],
                      then=atf.call(COLLECT), on_failure=atf.call(FAILED))
    assert (group.status, group.total) == ("running", 1000)
    # When every due task runs
    outcomes = run_due_tasks(lambdas=[ECHO, COLLECT, FAILED])
    # Then `then` ran once, after the last member, with the 1,000 results in order
    ran = [o.lambda_name for o in outcomes]
    assert ran.count(COLLECT) == 1 and ran.index(COLLECT) == len(ran) - 1
    assert ran.count(FAILED) == 0
    assert {group.then_id: list(range(1000))} == SEEN
    assert group.refresh().status == "succeeded" and group.succeeded == 1000
    assert TaskEntity.objects.get(pk=group.on_failure_id).status == "cancelled"


@pytest.mark.django_db
def test_a_fatal_member_fails_the_group_and_runs_on_failure_once(
        group_lambdas: None, run_due_tasks: Callable[..., list[TaskOutcome]]) -> None:
    group = atf.group([atf.call(ECHO, {"n": n, "fail": n == 7}) for n in range(20)],
                      then=atf.call(COLLECT), on_failure=atf.call(FAILED))
    outcomes = run_due_tasks(lambdas=[ECHO, COLLECT, FAILED])
    ran = [o.lambda_name for o in outcomes]
    assert ran.count(COLLECT) == 0 and ran.count(FAILED) == 1
    assert group.refresh().status == "failed" and group.failed == 1
    then = TaskEntity.objects.get(pk=group.then_id)
    assert then.status == "cancelled" and then.last_error["type"] == "GroupFailed"
    # on_failure reads the members' results too: None where one did not succeed
    assert SEEN[group.on_failure_id][7] is None and SEEN[group.on_failure_id][8] == 8


@pytest.mark.django_db
def test_a_group_in_a_transaction_that_rolls_back_leaves_nothing(group_lambdas: None) -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        atf.group([atf.call(ECHO, {"n": n}) for n in range(5)], then=atf.call(COLLECT),
                  on_failure=atf.call(FAILED))
        raise RuntimeError("the caller fails")
    assert not TaskGroup.objects.exists() and not TaskEntity.objects.exists()


@pytest.mark.django_db
def test_a_bad_member_refuses_the_whole_group_naming_it(group_lambdas: None) -> None:
    with pytest.raises(atf.InvalidTask if hasattr(atf, "InvalidTask") else Exception) as info:
        atf.group([atf.call(ECHO, {"n": 1}), atf.call("groups.nope")], then=atf.call(COLLECT))
    assert "tasks[1].lambda" in info.value.errors
    assert not TaskEntity.objects.exists()


@pytest.mark.django_db
def test_a_group_is_a_step_of_a_chain(
        group_lambdas: None, run_due_tasks: Callable[..., list[TaskOutcome]]) -> None:
    # Given a chain: a task, then a group of 3, then a task that becomes the group's `then`
    first, then = atf.chain(atf.call(ECHO, {"n": -1}),
                            atf.GroupRequest([atf.call(ECHO, {"n": n}) for n in range(3)]),
                            atf.call(COLLECT))
    group = TaskGroup.objects.get(then_id=then.pk)
    assert set(TaskEntity.objects.filter(group=group).values_list("status", flat=True)) == {
        "waiting"}
    outcomes = run_due_tasks(lambdas=[ECHO, COLLECT])
    assert [o.lambda_name for o in outcomes][0] == ECHO and outcomes[0].task_id == first.pk
    assert outcomes[-1].lambda_name == COLLECT and SEEN[then.pk] == [0, 1, 2]


def _finish_all_at_once(group: TaskGroup) -> None:
    """Claim and start every member, then finish them all at once, each in its own thread."""
    now = timezone.now() + timedelta(seconds=1)
    lambda_id = Lambda.objects.get(name=ECHO).pk
    batch = store.enqueue_due(lambda_id, limit=100, now=now, skip_collections=[],
                              decide=lambda collection: Decision.ENQUEUE)
    claimed = store.claim([m for _p, m in batch.messages], worker="w1", lambda_ids=[lambda_id],
                          now=now, start=True)
    assert len(claimed) == group.total
    done = store.Result(outcome=store.Outcome.SUCCESS, value=1)
    race(*[lambda task=task: store.finish(task, done, now=now) for task in claimed])


@pytest.mark.django_db(transaction=True)
def test_the_last_members_ending_at_once_release_then_exactly_once(
        group_lambdas: None, monkeypatch: pytest.MonkeyPatch) -> None:
    releases: list[int] = []
    real_release = guarded.release
    monkeypatch.setattr(guarded, "release",
                        lambda group, now: (releases.append(group.pk), real_release(group, now)))
    for _round in range(5):
        group = atf.group([atf.call(ECHO, {"n": n}) for n in range(4)], then=atf.call(COLLECT))
        _finish_all_at_once(group)
        assert group.refresh().status == "succeeded" and group.succeeded == 4
        assert releases.count(group.pk) == 1
        assert TaskEntity.objects.get(pk=group.then_id).status == "new"


def _statements_of_a_plain_finish(monkeypatch: pytest.MonkeyPatch) -> int:
    """The statements one plain task's finish sends: Django's, and the backend's own."""
    now = timezone.now() + timedelta(seconds=1)
    task = atf.schedule(ECHO, {"n": 1})
    lambda_id = Lambda.objects.get(name=ECHO).pk
    batch = store.enqueue_due(lambda_id, limit=10, now=now, skip_collections=[],
                              decide=lambda collection: Decision.ENQUEUE)
    (claimed,) = store.claim([m for _p, m in batch.messages], worker="w1",
                             lambda_ids=[lambda_id], now=now, start=True)
    assert claimed.task_id == task.pk
    sent: list[str] = []
    real = postgres._execute
    monkeypatch.setattr(postgres, "_execute",
                        lambda sql, params, *, prepare: (sent.append(sql),
                                                         real(sql, params, prepare=prepare))[1])
    with CaptureQueriesContext(connection) as django_queries:
        store.finish(claimed, store.Result(outcome=store.Outcome.SUCCESS, value=1), now=now)
    return len(sent) + len(django_queries)


@pytest.mark.django_db
def test_a_plain_tasks_finish_sends_no_statement_more(
        group_lambdas: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # Measured on the code before groups: the finish statement inside a savepoint (the
    # test's transaction), its release: 3.
    assert _statements_of_a_plain_finish(monkeypatch) == 3


@pytest.mark.django_db
def test_a_group_on_the_orm_backend_runs_then_once(
        group_lambdas: None, run_due_tasks: Callable[..., list[TaskOutcome]]) -> None:
    # The ORM backend (SQLite's, and any other database's) learns a finished task's group
    # from the statement that locks it, as PostgreSQL's finish does
    backends.use(OrmBackend())
    try:
        group = atf.group([atf.call(ECHO, {"n": n}) for n in range(3)], then=atf.call(COLLECT))
        outcomes = run_due_tasks(lambdas=[ECHO, COLLECT])
    finally:
        backends.use(None)
    assert [o.lambda_name for o in outcomes].count(COLLECT) == 1
    assert {group.then_id: [0, 1, 2]} == SEEN and group.refresh().status == "succeeded"


@pytest.mark.django_db
def test_a_group_after_a_failed_task_fails_at_once_and_runs_on_failure(
        group_lambdas: None, run_due_tasks: Callable[..., list[TaskOutcome]]) -> None:
    # Given a chain whose first step already failed, a group after it starts failed
    first = atf.schedule(ECHO, {"n": 0, "fail": True})
    run_due_tasks(lambdas=[ECHO])
    tasks = atf.chain(atf.call(COLLECT, after=[first.pk]),
                      atf.GroupRequest([atf.call(ECHO, {"n": n}) for n in range(3)],
                                       on_failure=atf.call(FAILED)))
    group = TaskGroup.objects.get()
    assert (group.status, group.failed) == ("failed", 3)
    assert TaskEntity.objects.get(pk=group.on_failure_id).status == "new"
    assert [t.status for t in tasks] == ["cancelled"]  # a group without `then` adds no task
