"""A group's members that are chains, or that an idempotency key names: a chain member counts
when its last step ends, and fails the group when any step does not succeed; a keyed member is
the existing task of its key, counted at once if it ended, in one group only; a group's own
key returns the first group."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.apps import apps
from django.db import transaction
from django.utils import timezone

from tasks_core import atf, store
from tasks_core.exceptions import InvalidTask
from tasks_core.gating import Decision
from tasks_core.models import Lambda, TaskEntity, TaskGroup
from tasks_core.store.backends import postgres
from tests.integration.tasks_core.test_groups import (  # noqa: F401 - group_lambdas: a fixture
    COLLECT,
    ECHO,
    FAILED,
    SEEN,
    group_lambdas,
)
from workers.testing import TaskOutcome

pytestmark = pytest.mark.usefixtures("group_lambdas")

Run = Callable[..., list[TaskOutcome]]


def _chain(*numbers: int, fail: int | None = None) -> atf.ChainRequest:
    return atf.ChainRequest([atf.call(ECHO, {"n": n, "fail": n == fail}) for n in numbers])


def _ran(outcomes: list[TaskOutcome]) -> list[Any]:
    """What each echo that ran was asked for, in the order they ran."""
    payloads = dict(TaskEntity.objects.values_list("pk", "payload"))
    return [payloads[o.task_id].get("n") for o in outcomes if o.lambda_name == ECHO]


# --- chains as members -----------------------------------------------------------------------


@pytest.mark.django_db
def test_a_chain_member_counts_when_its_last_step_succeeds(run_due_tasks: Run) -> None:
    # Given a group of a task, a chain of three steps, and a task, with a `then`
    group = atf.group([atf.call(ECHO, {"n": 0}), _chain(10, 11, 12), atf.call(ECHO, {"n": 2})],
                      then=atf.call(COLLECT), on_failure=atf.call(FAILED))
    # The chain's last step is the member: the group has three
    assert group.total == 3 and TaskEntity.objects.filter(group=group).count() == 3
    # When every due task runs
    outcomes = run_due_tasks(lambdas=[ECHO, COLLECT, FAILED])
    # Then the steps ran in order, `then` ran once, last, and read the chain's last result in
    # the chain's place
    ran = _ran(outcomes)
    assert ran.index(10) < ran.index(11) < ran.index(12)
    assert [o.lambda_name for o in outcomes][-1] == COLLECT
    assert {group.then_id: [0, 12, 2]} == SEEN
    assert group.refresh().status == "succeeded" and group.succeeded == 3


@pytest.mark.django_db
def test_a_failing_step_of_a_chain_member_fails_the_group_once(run_due_tasks: Run) -> None:
    # Given a group whose chain member's middle step fails fatally
    group = atf.group([_chain(10, 11, 12, fail=11), atf.call(ECHO, {"n": 1})],
                      then=atf.call(COLLECT), on_failure=atf.call(FAILED))
    outcomes = run_due_tasks(lambdas=[ECHO, COLLECT, FAILED])
    # Then the step after it never ran: it ended cancelled, and with it the member
    assert 12 not in _ran(outcomes)
    last = TaskEntity.objects.get(group=group, group_position=1)
    assert last.status == "cancelled"
    # The group failed, `then` never ran, on_failure ran once and read None for the chain
    ran = [o.lambda_name for o in outcomes]
    assert ran.count(COLLECT) == 0 and ran.count(FAILED) == 1
    assert group.refresh().status == "failed" and group.failed == 1
    assert {group.on_failure_id: [None, 1]} == SEEN


@pytest.mark.django_db
def test_a_cancelled_step_fails_the_group_at_once() -> None:
    group = atf.group([_chain(10, 11)], on_failure=atf.call(FAILED))
    first = TaskEntity.objects.get(payload__n=10)
    atf.cancel(first.pk)
    assert group.refresh().status == "failed"
    assert TaskEntity.objects.get(pk=group.on_failure_id).status == "new"


@pytest.mark.django_db
def test_chain_members_cost_a_statement_per_step_depth_not_per_member(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Given 200 chain members of three steps each and 300 plain members
    inserts: list[int] = []
    real = postgres._execute
    monkeypatch.setattr(postgres, "_execute", lambda sql, params, *, prepare: (
        inserts.append(1) if sql in (postgres._INSERT, postgres._INSERT_ONE) else None,
        real(sql, params, prepare=prepare))[1])
    members: list[Any] = [_chain(1, 2, 3) for _ in range(200)]
    members += [atf.call(ECHO, {"n": n}) for n in range(300)]
    with transaction.atomic():
        group = atf.group(members, then=atf.call(COLLECT))
    # Then the steps took one insert per depth (2), the 500 members one, the callback one
    assert len(inserts) == 4
    assert TaskEntity.objects.count() == 200 * 3 + 300 + 1 and group.total == 500


@pytest.mark.django_db
def test_a_group_with_a_chain_member_in_a_rolled_back_transaction_leaves_nothing() -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        atf.group([_chain(1, 2), atf.call(ECHO, {"n": 3})], then=atf.call(COLLECT))
        raise RuntimeError("the caller fails")
    assert not TaskGroup.objects.exists() and not TaskEntity.objects.exists()


@pytest.mark.django_db
def test_a_group_with_a_chain_member_is_a_step_of_a_chain(run_due_tasks: Run) -> None:
    # Given a chain: a task, then a group of a chain and a task, then a task
    first, then = atf.chain(atf.call(ECHO, {"n": -1}),
                            atf.GroupRequest([_chain(10, 11), atf.call(ECHO, {"n": 2})]),
                            atf.call(COLLECT))
    # Then the chain member's first step waits for the task before the group
    step = TaskEntity.objects.get(payload__n=10)
    assert step.status == "waiting" and list(step.parents.values_list("pk", flat=True)) == [
        first.pk]
    outcomes = run_due_tasks(lambdas=[ECHO, COLLECT])
    assert _ran(outcomes)[0] == -1 and {then.pk: [11, 2]} == SEEN


@pytest.mark.parametrize(("member", "error"), [
    ({"chain": []}, "tasks[0].chain"),
    ({"chain": "x"}, "tasks[0].chain"),
    ({"chain": [{"lambda": ECHO}], "lambda": ECHO}, "tasks[0].chain"),
    ({"chain": [{"lambda": ECHO}, {"lambda": "members.nope"}]}, "tasks[0].chain[1].lambda"),
    ({"chain": [{"lambda": ECHO, "idempotency_key": "k"}]},
     "tasks[0].chain[0].idempotency_key"),
    ({"chain": [{"lambda": ECHO}, {"lambda": ECHO, "after": [1]}]}, "tasks[0].chain[1].after"),
    ({"chain": [{"chain": [{"lambda": ECHO}]}]}, "tasks[0].chain[0].non_field_errors"),
])
@pytest.mark.django_db
def test_a_bad_chain_member_refuses_the_group_naming_its_step(member: Any, error: str) -> None:
    with pytest.raises(InvalidTask) as info:
        atf.group([member, atf.call(ECHO, {"n": 1})])
    assert error in info.value.errors, info.value.errors
    assert not TaskEntity.objects.exists() and not TaskGroup.objects.exists()


# --- members named by an idempotency key -----------------------------------------------------


@pytest.mark.django_db
def test_a_keyed_member_is_the_existing_task_of_its_key_in_its_place(run_due_tasks: Run) -> None:
    # Given a task scheduled earlier with a key
    earlier = atf.schedule(ECHO, {"n": 99}, idempotency_key="k-1")
    # When a group names that key in its second place
    group = atf.group([atf.call(ECHO, {"n": 0}),
                       atf.call(ECHO, {"n": 1}, idempotency_key="k-1"),
                       atf.call(ECHO, {"n": 2}, idempotency_key="k-2")],
                      then=atf.call(COLLECT))
    # Then no second task was made for it: the earlier one is the member, in its place
    assert TaskEntity.objects.filter(lambda_ref__name=ECHO).count() == 3
    earlier.refresh()
    assert (earlier.group_id, earlier.group_position) == (group.pk, 2)
    run_due_tasks(lambdas=[ECHO, COLLECT])
    # `then` reads the members in their order, not their ids'
    assert {group.then_id: [0, 99, 2]} == SEEN and group.refresh().status == "succeeded"


@pytest.mark.django_db
def test_a_keyed_member_that_already_succeeded_counts_at_once(run_due_tasks: Run) -> None:
    atf.schedule(ECHO, {"n": 7}, idempotency_key="done")
    run_due_tasks(lambdas=[ECHO])
    group = atf.group([atf.call(ECHO, idempotency_key="done")], then=atf.call(COLLECT))
    # Then the group succeeded as it was made, and its `then` is due
    assert (group.status, group.succeeded) == ("succeeded", 1)
    assert TaskEntity.objects.get(pk=group.then_id).status == "new"
    run_due_tasks(lambdas=[COLLECT])
    assert {group.then_id: [7]} == SEEN


@pytest.mark.django_db
def test_a_keyed_member_that_already_failed_fails_the_group_at_once(run_due_tasks: Run) -> None:
    atf.schedule(ECHO, {"n": 7, "fail": True}, idempotency_key="failed")
    run_due_tasks(lambdas=[ECHO])
    group = atf.group([atf.call(ECHO, {"n": 1}),
                       atf.call(ECHO, idempotency_key="failed")],
                      then=atf.call(COLLECT), on_failure=atf.call(FAILED))
    assert (group.status, group.failed) == ("failed", 1)
    assert TaskEntity.objects.get(pk=group.on_failure_id).status == "new"
    assert TaskEntity.objects.get(pk=group.then_id).status == "cancelled"


@pytest.mark.django_db
def test_a_running_task_that_joins_a_group_counts_when_it_finishes() -> None:
    # Given a keyed task already running on a worker
    now = timezone.now() + timedelta(seconds=1)
    task = atf.schedule(ECHO, {"n": 5}, idempotency_key="running")
    lambda_id = Lambda.objects.get(name=ECHO).pk
    batch = store.enqueue_due(lambda_id, limit=10, now=now, skip_collections=[],
                              decide=lambda collection: Decision.ENQUEUE)
    (claimed,) = store.claim([m for _p, m in batch.messages], worker="w1",
                             lambda_ids=[lambda_id], now=now, start=True)
    # When a group names it, and then its attempt ends
    group = atf.group([atf.call(ECHO, idempotency_key="running")], then=atf.call(COLLECT))
    assert group.status == "running" and claimed.task_id == task.pk
    store.finish(claimed, store.Result(outcome=store.Outcome.SUCCESS, value=5), now=now)
    # Then its end counted on the group it joined
    assert group.refresh().status == "succeeded"
    assert TaskEntity.objects.get(pk=group.then_id).status == "new"


@pytest.mark.django_db
def test_a_key_naming_another_groups_member_refuses_the_group() -> None:
    first = atf.group([atf.call(ECHO, {"n": 1}, idempotency_key="shared")])
    before = TaskEntity.objects.count()
    with pytest.raises(InvalidTask) as info:
        atf.group([atf.call(ECHO, {"n": 0}), atf.call(ECHO, idempotency_key="shared")],
                  then=atf.call(COLLECT))
    (message,) = info.value.errors["tasks[1].idempotency_key"]
    assert f"already a member of group {first.pk}" in message
    assert TaskEntity.objects.count() == before and TaskGroup.objects.count() == 1


@pytest.mark.django_db
def test_keys_repeated_in_a_group_or_on_its_callbacks_are_refused() -> None:
    with pytest.raises(InvalidTask) as info:
        atf.group([atf.call(ECHO, idempotency_key="k"), atf.call(ECHO, idempotency_key="k")],
                  then=atf.call(COLLECT, idempotency_key="t"))
    assert info.value.errors["tasks[1].idempotency_key"] == [
        "Repeats the idempotency key of tasks[0]."]
    assert "then.idempotency_key" in info.value.errors
    assert not TaskEntity.objects.exists()


@pytest.mark.django_db
def test_a_groups_own_key_returns_the_first_group() -> None:
    first = atf.group([atf.call(ECHO, {"n": n}) for n in range(3)], then=atf.call(COLLECT),
                      idempotency_key="album-7")
    again = atf.group([atf.call(ECHO, {"n": n}) for n in range(5)], idempotency_key="album-7")
    assert again.pk == first.pk and again.total == 3
    assert TaskEntity.objects.count() == 4 and TaskGroup.objects.count() == 1


@pytest.mark.django_db
def test_the_migration_numbers_the_members_of_earlier_groups_by_id() -> None:
    # Given two groups whose members have no place yet (made before positions were kept)
    groups = [atf.group([atf.call(ECHO, {"n": n}) for n in range(3)]) for _ in range(2)]
    TaskEntity.objects.update(group_position=None)
    migration = importlib.import_module("tasks_core.migrations.0027_group_member_positions")
    # When the migration numbers them
    migration.number_members(apps, None)
    # Then each group's members are 1, 2, 3 in id order
    for group in groups:
        assert list(group.members.order_by("pk").values_list("group_position", flat=True)) == [
            1, 2, 3]
