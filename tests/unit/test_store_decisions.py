"""The store's decisions (tasks_core.store.decisions) over plain values, without a database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tasks_core import states
from tasks_core.gating import Decision
from tasks_core.states import AssocStatus, TaskStatus
from tasks_core.store import ClaimedTask, Lease, Result
from tasks_core.store.decisions import (
    ChildStep,
    child_step,
    ending,
    initial,
    plan_due,
    revives,
)
from tasks_core.store.values import DueRow, LostAttempt, Outcome, encode

NOW = datetime(2026, 1, 1, tzinfo=UTC)
TIMEOUTS = states.Timeouts(enqueue_s=60, claim_s=30, heartbeat_s=20)
ERROR = {"type": "RuntimeError", "message": "boom", "traceback": ""}


def row(task_id: int, status: TaskStatus, *, lease: int = 3, attempts: int = 0,
        max_attempts: int = 3, collection: str = "default", priority: str = "default",
        started_at: datetime | None = None) -> DueRow:
    return DueRow(task_id=task_id, status=status, lease=lease, collection=collection,
                  priority=priority, attempts=attempts, max_attempts=max_attempts, worker="w1",
                  started_at=started_at)


def enqueue_all(collection: str) -> Decision:
    return Decision.ENQUEUE


# --- where due rows go -----------------------------------------------------------------------


def test_due_rows_are_enqueued_with_a_new_lease_except_an_expired_enqueued_one() -> None:
    rows = [row(1, TaskStatus.NEW), row(2, TaskStatus.ENQUEUED), row(3, TaskStatus.CLAIMED),
            row(4, TaskStatus.RETRYING, priority="high")]
    plan = plan_due(rows, decide=enqueue_all, now=NOW)
    assert plan.enqueue == [("default", Lease(1, 4)), ("default", Lease(2, 3)),
                            ("default", Lease(3, 4)), ("high", Lease(4, 4))]
    assert (plan.bump, plan.keep) == ([1, 3, 4], [2])
    assert plan.reenqueued == {"enqueued": 1, "claimed": 1, "retrying": 1}
    assert (plan.drop, plan.dead, plan.lost) == ([], [], [])


def test_a_processing_row_lost_its_worker_and_goes_dead_on_its_last_attempt() -> None:
    started = NOW - timedelta(minutes=1)
    rows = [row(1, TaskStatus.PROCESSING, attempts=1, started_at=started),
            row(2, TaskStatus.PROCESSING, attempts=3)]
    plan = plan_due(rows, decide=enqueue_all, now=NOW)
    assert plan.enqueue == [("default", Lease(1, 4))]
    assert plan.dead == [2]
    assert plan.lost == [LostAttempt(task_id=1, worker="w1", started_at=started),
                         LostAttempt(task_id=2, worker="w1", started_at=NOW)]


def test_gates_drop_or_postpone_a_collection_and_final_rows_are_left_alone() -> None:
    decisions = {"dropped": Decision.DROP, "paused": Decision.POSTPONE}
    rows = [row(1, TaskStatus.NEW, collection="dropped"), row(2, TaskStatus.NEW,
                                                              collection="paused"),
            row(3, TaskStatus.SUCCESS), row(4, TaskStatus.NEW)]
    plan = plan_due(rows, decide=lambda c: decisions.get(c, Decision.ENQUEUE), now=NOW)
    assert plan.drop == [1]
    assert plan.enqueue == [("default", Lease(4, 4))]


# --- how an attempt ends -------------------------------------------------------------------------


def claimed(attempt: int = 1, max_attempts: int = 3) -> ClaimedTask:
    return ClaimedTask(task_id=7, lease=5, lambda_name="x", collection="default",
                       priority="default", payload={}, attempt=attempt, max_attempts=max_attempts,
                       timeout_s=None, heartbeat_timeout_s=30.0)


#: The lambda's and the settings' part of ending(): backoff, grace and the result limit.
POLICY: dict[str, Any] = {"now": NOW, "timeouts": TIMEOUTS, "backoff_base_s": 2,
                          "backoff_cap_s": 100, "timeout_grace_s": 5, "max_result_bytes": 64}


def end(result: Result, task: ClaimedTask | None = None) -> tuple[TaskStatus, object, object]:
    e = ending(task or claimed(), result, rand=lambda: 0.5, **POLICY)
    return e.status, e.assoc.status, e.assoc.next_trigger_at


def test_success_keeps_the_result_and_ends_the_task() -> None:
    e = ending(claimed(), Result(outcome=Outcome.SUCCESS, value={"ok": 1}, worker="w9"),
               **POLICY)
    assert (e.status, e.result, e.finished_at, e.outcome, e.worker) == (
        TaskStatus.SUCCESS, {"ok": 1}, NOW, Outcome.SUCCESS, "w9")
    assert (e.assoc.status, e.assoc.next_trigger_at) == (AssocStatus.COMPLETED, None)
    assert (e.task_id, e.lease, e.started_at) == (7, 5, NOW)


def test_fatal_ends_at_once_with_its_error_and_no_result() -> None:
    e = ending(claimed(), Result(outcome=Outcome.FATAL, value={"x": 1}, error=ERROR), **POLICY)
    assert (e.status, e.result, e.error, e.finished_at) == (TaskStatus.FATAL_FAILURE, None,
                                                            ERROR, NOW)


@pytest.mark.parametrize(("value", "status"), [
    ("x" * 62, TaskStatus.SUCCESS),  # 64 bytes of JSON text: at the limit
    ("x" * 63, TaskStatus.FATAL_FAILURE),
    ({"k": ["x" * 27, "y" * 27]}, TaskStatus.FATAL_FAILURE),  # 69 bytes in all
])
def test_a_result_over_the_limit_ends_the_attempt_as_a_fatal_failure(value: object,
                                                                     status: TaskStatus) -> None:
    e = ending(claimed(), Result(outcome=Outcome.SUCCESS, value=value), **POLICY)
    assert e.status is status
    if status is TaskStatus.FATAL_FAILURE:
        assert (e.result, e.outcome, e.error["type"]) == (None, Outcome.FATAL, "ResultTooLarge")
        assert "the limit is 64 (ATF_MAX_RESULT_BYTES)" in e.error["message"]


def test_a_result_is_written_as_the_text_the_executor_encoded_or_encoded_once_here() -> None:
    # The executor's text is kept as it is (its size is what the limit counts)...
    given = ending(claimed(), Result(outcome=Outcome.SUCCESS, value={"a": 1},
                                     value_json='{"a":1}'), **POLICY)
    assert given.result_json == '{"a":1}'
    # ...and a result without one (a remote worker's) is encoded here, compact.
    encoded = ending(claimed(), Result(outcome=Outcome.SUCCESS, value={"a": [1, "é"]}),
                     **POLICY)
    assert encoded.result_json == encode({"a": [1, "é"]}) == '{"a":[1,"\\u00e9"]}'
    none = ending(claimed(), Result(outcome=Outcome.SUCCESS, value=None), **POLICY)
    assert none.result_json is None  # no result: the column stays as it is


def test_a_result_with_no_json_text_ends_the_attempt_as_a_fatal_failure() -> None:
    e = ending(claimed(), Result(outcome=Outcome.SUCCESS, value=float("nan")), **POLICY)
    assert (e.status, e.result, e.result_json, e.error["type"]) == (
        TaskStatus.FATAL_FAILURE, None, None, "ResultNotJSON")


def test_a_retry_waits_its_explicit_delay_or_the_backoff() -> None:
    explicit = Result(outcome=Outcome.RETRY, error=ERROR, delay_s=42)
    assert end(explicit) == (TaskStatus.RETRYING, AssocStatus.STARTED,
                             NOW + timedelta(seconds=42))
    # backoff: rand() * min(cap, base * 2**(attempt - 1)) = 0.5 * 2 * 4 on the third attempt
    backoff = Result(outcome=Outcome.RETRY, error=ERROR)
    assert end(backoff, claimed(attempt=3, max_attempts=5))[2] == NOW + timedelta(seconds=4)


def test_a_retry_on_the_last_attempt_goes_dead_and_the_attempt_says_so() -> None:
    e = ending(claimed(attempt=3, max_attempts=3), Result(outcome=Outcome.RETRY, error=ERROR),
               **POLICY)
    assert (e.status, e.outcome, e.finished_at) == (TaskStatus.DEAD, Outcome.DEAD, NOW)
    assert e.assoc.next_trigger_at is None


def test_a_timed_out_attempt_waits_out_the_workers_grace_and_keeps_its_outcome() -> None:
    timed_out = Result(outcome=Outcome.TIMEOUT, error=ERROR)
    # backoff would say 0.5 * 2 = 1 s; the grace of 5 s makes it twice that
    assert end(timed_out) == (TaskStatus.RETRYING, AssocStatus.STARTED,
                              NOW + timedelta(seconds=10))
    last = ending(claimed(attempt=3, max_attempts=3), timed_out, **POLICY)
    assert (last.status, last.outcome) == (TaskStatus.DEAD, Outcome.TIMEOUT)


# --- chains -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("statuses", "expected"), [
    ({}, TaskStatus.NEW),
    ({1: TaskStatus.SUCCESS, 2: TaskStatus.SUCCESS}, TaskStatus.NEW),
    ({1: TaskStatus.SUCCESS, 2: TaskStatus.PROCESSING}, TaskStatus.WAITING),
    ({1: TaskStatus.DEAD, 2: TaskStatus.NEW}, TaskStatus.CANCELLED),
])
def test_a_new_task_starts_by_its_parents(statuses: dict[int, TaskStatus],
                                          expected: TaskStatus) -> None:
    start = initial(tuple(statuses), statuses)
    assert start.status is expected
    assert (start.last_error is not None) == (expected is TaskStatus.CANCELLED)


def test_a_child_of_a_failed_parent_starts_cancelled_naming_it() -> None:
    start = initial((1, 2), {1: TaskStatus.SUCCESS, 2: TaskStatus.FATAL_FAILURE})
    assert start.last_error == {"type": "ParentFailed",
                                "message": "parent task 2 ended fatal_failure", "traceback": ""}


@pytest.mark.parametrize("status", sorted(states.FINAL - {TaskStatus.SUCCESS}))
def test_a_parent_that_did_not_succeed_cancels_its_children(status: TaskStatus) -> None:
    assert child_step(status) is ChildStep.CANCEL


def test_a_child_wakes_once_every_parent_succeeded() -> None:
    assert child_step(TaskStatus.SUCCESS, [TaskStatus.SUCCESS] * 2) is ChildStep.WAKE
    assert child_step(TaskStatus.SUCCESS, [TaskStatus.SUCCESS, TaskStatus.NEW]) is ChildStep.WAIT


def test_a_requeued_parent_revives_a_child_unless_another_parent_is_failed() -> None:
    assert revives([TaskStatus.NEW, TaskStatus.SUCCESS])
    assert not revives([TaskStatus.NEW, TaskStatus.DEAD])

