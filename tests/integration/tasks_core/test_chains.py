"""Chains: children wait for their parents, are cancelled (naming the parent) when one fails,
and come back when that parent is requeued from the dead-letter queue.

The worker's side is played through the store itself: enqueue, claim, start, finish.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

import pytest
import redis
from django.utils import timezone

from tasks_core import atf, store
from tasks_core.exceptions import InvalidTask
from tasks_core.gating import Decision
from tasks_core.models import Lambda, TaskDependency, TaskEntity
from tasks_core.states import FINAL, TaskStatus
from tests.conftest import Processes, wait_for

pytestmark = [pytest.mark.django_db]

Outcome = store.Outcome

SUCCESS = store.Result(outcome=Outcome.SUCCESS, value={"ok": True})
FATAL = store.Result(outcome=Outcome.FATAL,
                     error={"type": "Fatal", "message": "bad input", "traceback": ""})
CRASH = store.Result(outcome=Outcome.RETRY,
                     error={"type": "RuntimeError", "message": "boom", "traceback": ""})


def later() -> datetime:
    """A moment after the tasks a test scheduled (scheduling reads the real clock)."""
    return timezone.now() + timedelta(seconds=1)


def work(outcomes: Mapping[int, store.Result] | None = None) -> list[int]:
    """One worker pass over every due task: each ends as `outcomes` says (default success).

    Returns the ids that ran, in order.
    """
    outcomes = outcomes or {}
    now = later()
    ran: list[int] = []
    for lambda_id in Lambda.objects.values_list("pk", flat=True):
        batch = store.enqueue_due(lambda_id, limit=100, now=now, skip_collections=[],
                                  decide=lambda collection: Decision.ENQUEUE)
        messages = [message for _priority, message in batch.messages]
        for task in store.claim(messages, worker="w1", lambda_ids=[lambda_id], now=now):
            assert store.start(task, now=now)
            store.finish(task, outcomes.get(task.task_id, SUCCESS), now=now)
            ran.append(task.task_id)
    return ran


def status(task: TaskEntity) -> str:
    return TaskEntity.objects.get(pk=task.pk).status


def reason(task: TaskEntity) -> str:
    return TaskEntity.objects.get(pk=task.pk).last_error["message"]


def links() -> list[tuple[int, int]]:
    """(parent, child) pairs."""
    return list(TaskDependency.objects.order_by("parent_id", "child_id")
                .values_list("parent_id", "child_id"))


def three_steps() -> list[TaskEntity]:
    return atf.chain(atf.call("demo.noop", {"step": 1}), atf.call("demo.noop", {"step": 2}),
                     atf.call("demo.noop", {"step": 3}, priority="high"))


@pytest.mark.sqlite
def test_a_chain_runs_its_steps_one_after_another() -> None:
    # Given a chain of three steps
    first, second, third = three_steps()
    # Then only the first may run; the others wait, and the links are visible both ways
    assert [status(t) for t in (first, second, third)] == ["new", "waiting", "waiting"]
    assert links() == [(first.pk, second.pk), (second.pk, third.pk)]
    # When workers run what is due, pass after pass
    order = work() + work() + work()
    # Then the steps ran in order, each once, and all succeeded
    assert order == [first.pk, second.pk, third.pk]
    assert [status(t) for t in (first, second, third)] == ["success"] * 3
    assert TaskEntity.objects.get(pk=third.pk).priority == "high"


@pytest.mark.sqlite
def test_a_fatal_parent_cancels_its_children_naming_the_parent() -> None:
    # Given a chain of three steps
    first, second, third = three_steps()
    # When the first ends fatal
    work({first.pk: FATAL})
    # Then the rest is cancelled, each naming the parent that failed
    assert [status(t) for t in (first, second, third)] == ["fatal_failure", "cancelled",
                                                          "cancelled"]
    assert reason(second) == f"parent task {first.pk} ended fatal_failure"
    assert reason(third) == f"parent task {second.pk} ended cancelled"
    assert TaskEntity.objects.get(pk=second.pk).last_error["type"] == "ParentFailed"
    # And nothing else runs
    assert work() == []


@pytest.mark.sqlite
def test_a_dead_parent_requeued_from_the_dead_letter_queue_revives_its_children() -> None:
    # Given a chain whose first step has one attempt, and that attempt fails: it is dead
    first, second, third = atf.chain(atf.call("demo.noop", max_attempts=1),
                                     atf.call("demo.noop"), atf.call("demo.noop"))
    work({first.pk: CRASH})
    assert [status(t) for t in (first, second, third)] == ["dead", "cancelled", "cancelled"]
    assert reason(second) == f"parent task {first.pk} ended dead"
    # When an operator requeues it from the dead-letter queue
    assert store.requeue([first.pk], now=timezone.now()) == 1
    # Then its children wait again
    assert [status(t) for t in (first, second, third)] == ["new", "waiting", "waiting"]
    assert TaskEntity.objects.get(pk=second.pk).last_error is None
    # And when it succeeds this time, the children run
    order = work() + work() + work()
    assert order == [first.pk, second.pk, third.pk]
    assert [status(t) for t in (first, second, third)] == ["success"] * 3


@pytest.mark.sqlite
def test_schedule_after_several_parents_waits_for_all_of_them() -> None:
    # Given a task scheduled after two parents
    left = atf.schedule("demo.noop")
    right = atf.schedule("demo.noop", delay=3600)
    join = atf.schedule("demo.noop", {"join": True}, after=[left.pk, right.pk])
    assert status(join) == "waiting"
    # When only one parent succeeded, Then it still waits
    work()
    assert (status(left), status(join)) == ("success", "waiting")
    # When the other one is cancelled, Then it is cancelled too, naming that parent
    atf.cancel(right.pk)
    assert status(join) == "cancelled"
    assert reason(join) == f"parent task {right.pk} ended cancelled"


@pytest.mark.sqlite
def test_after_a_finished_parent_starts_at_once_or_cancelled() -> None:
    # Given one parent that succeeded and one that failed
    good = atf.schedule("demo.noop")
    bad = atf.schedule("demo.noop")
    work({bad.pk: FATAL})
    # When tasks are scheduled after each
    after_good = atf.schedule("demo.noop", after=[good.pk])
    after_bad = atf.schedule("demo.noop", after=[bad.pk])
    # Then the first is ready at once and the second is cancelled, naming the parent
    assert status(after_good) == "new"
    assert status(after_bad) == "cancelled"
    assert reason(after_bad) == f"parent task {bad.pk} ended fatal_failure"


@pytest.mark.sqlite
def test_a_chain_is_scheduled_all_or_nothing() -> None:
    # Given a chain whose second step names an unknown lambda
    with pytest.raises(InvalidTask):
        atf.chain(atf.call("demo.noop"), atf.call("tests.nope"))
    # Then no step was created
    assert not TaskEntity.objects.exists()


@pytest.mark.sqlite
def test_requeue_keeps_a_child_cancelled_while_another_parent_failed() -> None:
    # Given a child of two parents that both ended fatal
    left = atf.schedule("demo.noop")
    right = atf.schedule("demo.noop")
    join = atf.schedule("demo.noop", after=[left.pk, right.pk])
    work({left.pk: FATAL, right.pk: FATAL})
    assert status(join) == TaskStatus.CANCELLED
    # When only one of them is requeued and succeeds
    store.requeue([left.pk], now=timezone.now(), statuses=[TaskStatus.FATAL_FAILURE])
    work()
    # Then the child is not left waiting for ever on the parent that is still failed
    assert status(join) == TaskStatus.CANCELLED


@pytest.mark.sqlite
def test_the_parents_and_children_relations_point_the_right_way() -> None:
    first, second, third = three_steps()
    assert list(second.parents.values_list("pk", flat=True)) == [first.pk]
    assert list(second.children.values_list("pk", flat=True)) == [third.pk]


# --- end to end: a real consumer and worker ----------------------------------------------


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_chains_on_a_real_worker(processes: Processes, redis_client: redis.Redis) -> None:
    # Given a chain that succeeds and a chain whose middle step fails for good
    good = atf.chain(*(atf.call("demo.noop", {"step": n}) for n in range(3)))
    bad = atf.chain(atf.call("demo.noop"), atf.call("demo.fail", {"mode": "fatal"}),
                    atf.call("demo.noop"))
    # When a consumer and a worker run
    processes.start("runconsumer", "--poll-interval", "0.2")
    processes.start("runworker", "demo.noop", "demo.fail", "--threads", "2")
    everything = [*good, *bad]
    wait_for(lambda: all(status(t) in FINAL for t in everything), timeout_s=60,
             message="both chains finished")
    # Then the good chain ran in order, and the bad one stopped at its failed step
    assert [status(t) for t in good] == ["success"] * 3
    starts = [TaskEntity.objects.get(pk=t.pk).started_at for t in good]
    assert starts == sorted(starts)
    assert [status(t) for t in bad] == ["success", "fatal_failure", "cancelled"]
    assert reason(bad[2]) == f"parent task {bad[1].pk} ended fatal_failure"


@pytest.mark.django_db(transaction=True)
def test_a_childs_start_does_not_wait_for_the_consumers_poll(processes: Processes,
                                                              redis_client: redis.Redis) -> None:
    # Given a consumer that polls only every 20 seconds, and a worker
    processes.start("runconsumer", "--poll-interval", "20")
    processes.start("runworker", "demo.noop", "--threads", "1")
    parent, child = atf.chain(atf.call("demo.noop"), atf.call("demo.noop"))
    # When the parent succeeds
    wait_for(lambda: status(child) == "success", timeout_s=15, message="the child's success")
    # Then its success woke the consumer: the child was enqueued at once, not at the next poll
    parent, child = (TaskEntity.objects.get(pk=t.pk) for t in (parent, child))
    assert (child.enqueued_at - parent.finished_at).total_seconds() < 2
