"""tasks_core.operations: the one scope rule and the one set of limits of operator actions."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from tasks_core import limits, operations
from tasks_core.access import EVERY_TEAM, Scope
from tasks_core.exceptions import InvalidTask, LambdaNotFound, TaskNotFound
from tasks_core.models import Lambda, TaskEntity
from tasks_core.states import TaskStatus
from tests.factories import LambdaFactory, TaskFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def mine() -> Lambda:
    return LambdaFactory(name="payments.charge")


@pytest.fixture
def theirs() -> Lambda:
    return LambdaFactory(name="search.reindex")


def scope_of(lam: Lambda) -> Scope:
    return Scope(team_ids=frozenset({lam.team_id}))


def statuses(tasks: list[TaskEntity]) -> list[str]:
    return [TaskEntity.objects.get(pk=task.pk).status for task in tasks]


def test_a_bulk_requeue_works_in_chunks_and_only_on_the_scope(
        mine: Lambda, theirs: Lambda, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given seven dead tasks of each team, and chunks of three
    monkeypatch.setattr(limits, "CHUNK", 3)
    my_dead = [TaskFactory(lambda_ref=mine, status=TaskStatus.DEAD) for _ in range(7)]
    their_dead = [TaskFactory(lambda_ref=theirs, status=TaskStatus.DEAD) for _ in range(7)]
    # When my team requeues all fourteen by id
    done = operations.requeue_many(scope_of(mine), [t.pk for t in my_dead + their_dead])
    # Then all of mine are new again, in three chunks, and none of theirs was touched
    assert (done.selected, done.changed) == (7, 7)
    assert set(statuses(my_dead)) == {"new"}
    assert set(statuses(their_dead)) == {"dead"}


def test_a_bulk_requeue_by_queryset_follows_the_selection(mine: Lambda,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # Given dead tasks in two collections, and chunks of two (rows leave the selection as
    # they are requeued, so a page-by-offset would skip some)
    monkeypatch.setattr(limits, "CHUNK", 2)
    wanted = [TaskFactory(lambda_ref=mine, collection="a", status=TaskStatus.DEAD)
              for _ in range(5)]
    other = TaskFactory(lambda_ref=mine, collection="b", status=TaskStatus.DEAD)
    # When the dead letters of one collection are requeued
    selection = operations.dead_letters(EVERY_TEAM, lambda_name=mine.name, collection="a")
    done = operations.requeue_many(EVERY_TEAM, selection, statuses=[TaskStatus.DEAD])
    # Then exactly those are new
    assert done.changed == 5
    assert set(statuses(wanted)) == {"new"} and statuses([other]) == ["dead"]


def test_run_now_many_moves_only_delayed_and_retrying_tasks(mine: Lambda) -> None:
    now = timezone.now()
    delayed = TaskFactory(lambda_ref=mine, run_at=now + timedelta(hours=1))
    retrying = TaskFactory(lambda_ref=mine, status=TaskStatus.RETRYING)
    due = TaskFactory(lambda_ref=mine, run_at=now - timedelta(seconds=1))
    dead = TaskFactory(lambda_ref=mine, status=TaskStatus.DEAD)
    done = operations.run_now_many(scope_of(mine), [delayed.pk, retrying.pk, due.pk, dead.pk],
                                   now=now)
    assert (done.selected, done.changed, done.skipped) == (4, 2, 2)
    assert TaskEntity.objects.get(pk=delayed.pk).run_at == now


def test_cancel_many_tells_why_a_task_was_not_cancelled(mine: Lambda) -> None:
    waiting = TaskFactory(lambda_ref=mine)
    running = TaskFactory(lambda_ref=mine, status=TaskStatus.PROCESSING)
    finished = TaskFactory(lambda_ref=mine, status=TaskStatus.SUCCESS)
    done = operations.cancel_many(scope_of(mine), [waiting.pk, running.pk, finished.pk])
    assert (done.selected, done.changed) == (3, 2)
    assert done.problems == (f"Task #{running.pk} is running: its worker is asked to stop it.",
                             f"Task #{finished.pk} not cancelled: a task in status success "
                             f"cannot be cancelled: it finished.")
    assert statuses([waiting, running, finished]) == ["cancelled", "processing", "success"]


def test_one_task_outside_the_scope_is_not_found(mine: Lambda, theirs: Lambda) -> None:
    task = TaskFactory(lambda_ref=theirs, status=TaskStatus.DEAD)
    for action in (operations.cancel, operations.requeue, operations.run_now):
        with pytest.raises(TaskNotFound):
            action(scope_of(mine), task.pk)
    assert statuses([task]) == ["dead"]


def test_a_gate_outside_the_scope_or_in_the_past_is_refused(mine: Lambda,
                                                            theirs: Lambda) -> None:
    with pytest.raises(LambdaNotFound):
        operations.gate(scope_of(mine), theirs.name, "paused")
    with pytest.raises(InvalidTask) as caught:
        operations.gate(scope_of(mine), mine.name, "paused",
                        until=timezone.now() - timedelta(minutes=1))
    assert list(caught.value.errors) == ["until"]
    assert Lambda.objects.get(pk=theirs.pk).gate == Lambda.objects.get(pk=mine.pk).gate == "open"


def test_too_many_ids_are_refused(mine: Lambda) -> None:
    with pytest.raises(InvalidTask) as caught:
        operations.dead_letters(EVERY_TEAM, ids=range(1, limits.MAX_IDS + 2))
    assert list(caught.value.errors) == ["ids"]


def test_a_dead_letter_selection_of_another_teams_lambda_is_unknown(mine: Lambda,
                                                                    theirs: Lambda) -> None:
    with pytest.raises(InvalidTask) as caught:
        operations.dead_letters(scope_of(mine), lambda_name=theirs.name)
    assert caught.value.errors == {"lambda": [f"Unknown lambda {theirs.name!r}."]}
