"""Steps that resume: a step's result is recorded under the attempt's lease, a later attempt
gets it back without running the step again, and a stale execution records nothing."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
import redis
from django.utils import timezone

from tasks_api.serializers import TaskDetailSerializer
from tasks_core import atf, registry, store
from tasks_core import context as context_module
from tasks_core.context import StoreLink, TaskContext
from tasks_core.gating import Decision
from tasks_core.models import Lambda, TaskEntity, TaskProgress, TaskStep
from workers.testing import TaskOutcome

pytestmark = pytest.mark.django_db

FOUR = "steps.four"
#: The steps that really ran, (task id, attempt, step) each.
RAN: list[tuple[int, int, int]] = []


def four_steps(ctx: atf.TaskContext, payload: Any) -> list[int]:
    def run(number: int) -> int:
        RAN.append((ctx.task_id, ctx.attempt, number))
        return number * 10

    results = []
    for number in range(1, 5):
        results.append(ctx.step(f"step-{number}", run, number))
        if number == 2 and ctx.attempt == 1:
            raise atf.Retry("cut off after step 2", delay=0)
    return results


@pytest.fixture
def four(redis_client: redis.Redis) -> Iterator[None]:
    registry.register(FOUR, team="steps", max_attempts=3)(four_steps)
    RAN.clear()
    yield
    registry.unregister(FOUR)


def test_a_later_attempt_gets_recorded_steps_back_without_running_them(
        four: None, run_due_tasks: Callable[..., list[TaskOutcome]]) -> None:
    task = atf.schedule(FOUR)
    run_due_tasks(lambdas=[FOUR])
    run_due_tasks(lambdas=[FOUR], now=timezone.now() + timedelta(seconds=5))
    assert task.refresh().status == "success" and task.result == [10, 20, 30, 40]
    # steps 1 and 2 ran once, on the first attempt; 3 and 4 on the second
    assert [(task.pk, 1, 1), (task.pk, 1, 2), (task.pk, 2, 3), (task.pk, 2, 4)] == RAN
    steps = list(TaskStep.objects.filter(task=task).values_list("name", "attempt", "size"))
    assert steps == [("step-1", 1, 2), ("step-2", 1, 2), ("step-3", 2, 2), ("step-4", 2, 2)]
    shown = TaskDetailSerializer(TaskEntity.objects.get(pk=task.pk)).data["steps"]
    assert [(step["name"], step["size"]) for step in shown] == [
        ("step-1", 2), ("step-2", 2), ("step-3", 2), ("step-4", 2)]


def _claim_started(now: Any) -> store.ClaimedTask:
    lambda_id = Lambda.objects.get(name=FOUR).pk
    batch = store.enqueue_due(lambda_id, limit=10, now=now, skip_collections=[],
                              decide=lambda collection: Decision.ENQUEUE)
    (claimed,) = store.claim([m for _p, m in batch.messages], worker="w", lambda_ids=[lambda_id],
                             now=now, start=True)
    return claimed


def _context(task: store.ClaimedTask) -> TaskContext:
    return TaskContext(task_id=task.task_id, attempt=task.attempt, collection=task.collection,
                       priority=task.priority, lambda_name=task.lambda_name, _lease=task.lease)


def test_a_stale_execution_cannot_record_a_step(four: None) -> None:
    # Given a task whose first execution lost its worker (no heartbeat) and was taken over
    task = atf.schedule(FOUR)
    now = timezone.now() + timedelta(seconds=1)
    stale = _claim_started(now)
    later = now + timedelta(hours=1)  # past its heartbeat timeout: enqueued again
    fresh = _claim_started(later)
    assert fresh.lease > stale.lease
    # When the stale execution runs a step, Then it gets LeaseLost and nothing is recorded
    with pytest.raises(atf.LeaseLost):
        _context(stale).step("charge", lambda: "charged twice")
    assert not TaskStep.objects.filter(task_id=task.pk).exists()
    # ...while the current execution records its step
    assert _context(fresh).step("charge", lambda: "charged once") == "charged once"
    assert TaskStep.objects.get(task_id=task.pk).result == "charged once"


def test_steps_past_the_result_limit_end_the_task_fatally(
        four: None, settings: Any) -> None:
    settings.ATF_MAX_RESULT_BYTES = 30
    task = atf.schedule(FOUR)
    claimed = _claim_started(timezone.now() + timedelta(seconds=1))
    ctx = _context(claimed)
    assert ctx.step("small", lambda: "x" * 10) == "x" * 10
    with pytest.raises(atf.Fatal):
        ctx.step("big", lambda: "y" * 30)
    assert list(TaskStep.objects.filter(task_id=task.pk).values_list("name", flat=True)) == [
        "small"]
    assert TaskEntity.objects.get(pk=task.pk).status == "processing"


def test_progress_reported_a_thousand_times_in_a_second_is_written_at_most_twice(
        four: None, monkeypatch: pytest.MonkeyPatch) -> None:
    task = atf.schedule(FOUR)
    ctx = _context(_claim_started(timezone.now() + timedelta(seconds=1)))
    writes: list[float] = []
    real = StoreLink.report_progress
    monkeypatch.setattr(StoreLink, "report_progress",
                        lambda self, *args: (writes.append(args[1]), real(self, *args))[1])
    # 1,000 reports over one second of the attempt's clock (1 ms apart)
    clock = iter(1000.0 + n / 1000 for n in range(1001))
    monkeypatch.setattr(context_module, "monotonic", lambda: next(clock))
    written = [ctx.progress(done, 1000, note=f"{done} of 1000") for done in range(1, 1001)]
    assert 1 <= len(writes) <= 2 and written.count(True) == len(writes)
    row = TaskProgress.objects.get(task_id=task.pk)
    assert (row.done, row.total, row.note) == (writes[-1], 1000, f"{writes[-1]:.0f} of 1000")
    # ...and the API's task shows it
    shown = TaskDetailSerializer(TaskEntity.objects.get(pk=task.pk)).data["progress"]
    assert (shown["done"], shown["total"]) == (writes[-1], 1000)
