"""Run the tasks a test scheduled, in the test's own process and transaction, through the real
lifecycle.

`run_due_tasks()` does what a consumer and a worker would, one round after another: a consumer
pass (gates, quotas and priorities hold) pushes the due tasks to the queues, then each is
popped, claimed, started, run and its result recorded by the store, exactly as a worker does.
A round's successes may make more tasks due (a chain's next step, a task a lambda scheduled):
the next round runs those, until a round finds nothing to run. Every query goes through the
test's database connection, so tasks scheduled inside a Django `TestCase` (whose transaction
never commits) or a pytest-django `db` test are found, and what the lambdas write is rolled
back with the rest of the test. The consumer's turn on a lambda (workers.turns) is taken on
that connection too: no other is opened, none outlives the test to keep its database from
being dropped.

What differs from a worker process: the lambdas run one at a time in the calling thread, with
no heartbeat thread and no time limit. Queues are real: the test settings need a reachable
`ATF_REDIS_URL` (each concurrent test run its own `ATF_QUEUE_PREFIX`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.utils import timezone

from tasks_core import directory, queues, registry, shards, store
from tasks_core.claiming import Claimer
from tasks_core.conf import atf_settings
from tasks_core.context import TaskContext
from tasks_core.states import TaskStatus
from workers import turns
from workers.consumer import Consumer
from workers.executor import run_lambda
from workers.results import Tally, log_outcome

#: The worker name the tasks' attempts record.
WORKER_ID = "testing"
#: Rounds after which run_due_tasks() stops though tasks keep becoming due (a lambda that
#: schedules itself at once).
MAX_ROUNDS = 100


@dataclass(frozen=True, kw_only=True)
class TaskOutcome:
    """How one attempt ended, as the store recorded it."""

    task_id: int
    lambda_name: str
    attempt: int
    #: Where the attempt left the task: success, retrying, fatal_failure, dead, timeout...;
    #: None when its lease had moved on (the store refused the result).
    status: TaskStatus | None
    value: Any  #: what the lambda returned (None unless it succeeded)
    error: dict[str, str] | None  #: type, message and traceback of a failed attempt


def run_due_tasks(*, lambdas: Sequence[str] | None = None, now: datetime | None = None,
                  max_rounds: int = MAX_ROUNDS) -> list[TaskOutcome]:
    """Run every task of `lambdas` (default: all registered) that is due at `now` (default: the
    present), and those their successes make due, as the consumer and a worker would; one
    outcome per attempt, in the order they ran.

    A retry waits for its backoff: call again with a later `now` to run it.
    """
    names = list(registry.names() if lambdas is None else lambdas)
    clock = timezone.now if now is None else (lambda: now)
    queue = queues.backend()
    try:
        consumers = [Consumer(batch_size=atf_settings.consumer_batch_size,
                              poll_interval_s=atf_settings.poll_interval_s, queue=queue,
                              clock=clock, lambda_turn=turns.lambda_turn_in_caller, shard=alias)
                     for alias in shards.aliases()]
        claimer = Claimer(queue=queue, worker_id=WORKER_ID,
                          lambda_ids={name: directory.by_name(name).id for name in names},
                          priorities=atf_settings.priorities)
        outcomes: list[TaskOutcome] = []
        for _round in range(max_rounds):
            for consumer in consumers:  # a pass on every shard
                consumer.run_pass()
            claimed = _claim_all(claimer)
            if not claimed:
                break
            outcomes += [outcome for task in claimed
                         if (outcome := _attempt(task, clock())) is not None]
        return outcomes
    finally:
        queue.close()


def _claim_all(claimer: Claimer) -> list[store.ClaimedTask]:
    """Everything the lambdas' queues hold now, claimed (stale messages are dropped)."""
    claimed: list[store.ClaimedTask] = []
    while popped := claimer.take(atf_settings.consumer_batch_size, wait_s=0):
        claimed += popped
    return claimed


def _attempt(task: store.ClaimedTask, now: datetime) -> TaskOutcome | None:
    """Start, run and finish one claimed task as an executor would; None if it did not start."""
    if not store.start(task, now=now):
        return None
    ctx = TaskContext(task_id=task.task_id, attempt=task.attempt, collection=task.collection,
                      priority=task.priority, lambda_name=task.lambda_name, _lease=task.lease)
    result = run_lambda(task, ctx, worker=WORKER_ID)
    # run_lambda stamps the attempt's start with the present: its end comes no earlier.
    status = store.finish(task, result, now=max(now, timezone.now()))
    log_outcome(task, result, status, Tally())
    return TaskOutcome(task_id=task.task_id, lambda_name=task.lambda_name, attempt=task.attempt,
                       status=status, value=result.value, error=result.error)
