from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tasks_core import states
from tasks_core.exceptions import InvalidTransition
from tasks_core.states import AssocStatus, TaskStatus

NOW = datetime(2026, 1, 1, tzinfo=UTC)
TIMEOUTS = states.Timeouts(enqueue_s=60, claim_s=30, heartbeat_s=20)
ALL_EDGES = [(a, b) for a in TaskStatus for b in TaskStatus]


def test_every_status_has_a_lifecycle_row_and_an_entry_in_transitions() -> None:
    assert set(states.LIFECYCLE) == set(TaskStatus)
    assert set(states.TRANSITIONS) == set(TaskStatus)


@pytest.mark.parametrize(("current", "target"), ALL_EDGES)
def test_check_transition_allows_exactly_the_table(current: TaskStatus,
                                                   target: TaskStatus) -> None:
    if target in states.TRANSITIONS[current]:
        states.check_transition(current, target)
    else:
        with pytest.raises(InvalidTransition):
            states.check_transition(current, target)


@pytest.mark.parametrize(
    ("status", "assoc", "trigger"),
    [
        (TaskStatus.NEW, AssocStatus.NEW, NOW + timedelta(seconds=5)),  # run_at
        (TaskStatus.WAITING, AssocStatus.NEW, None),
        (TaskStatus.ENQUEUED, AssocStatus.STARTED, NOW + timedelta(seconds=60)),
        (TaskStatus.CLAIMED, AssocStatus.STARTED, NOW + timedelta(seconds=30)),
        (TaskStatus.PROCESSING, AssocStatus.STARTED, NOW + timedelta(seconds=20)),
        (TaskStatus.RETRYING, AssocStatus.STARTED, NOW + timedelta(seconds=7)),  # delay
        (TaskStatus.SUCCESS, AssocStatus.COMPLETED, None),
        (TaskStatus.FATAL_FAILURE, AssocStatus.COMPLETED, None),
        (TaskStatus.DEAD, AssocStatus.COMPLETED, None),
        (TaskStatus.CANCELLED, AssocStatus.COMPLETED, None),
        (TaskStatus.DROPPED, AssocStatus.COMPLETED, None),
    ],
)
def test_assoc_row_follows_the_lifecycle_table(status: TaskStatus, assoc: AssocStatus,
                                               trigger: datetime | None) -> None:
    row = states.assoc_row(status, now=NOW, timeouts=TIMEOUTS,
                           run_at=NOW + timedelta(seconds=5), delay_s=7)
    assert row == {"status": assoc.value, "next_trigger_at": trigger}


def test_final_statuses_have_no_way_forward_but_requeue() -> None:
    for status in states.FINAL:
        assert states.TRANSITIONS[status] <= {TaskStatus.NEW, TaskStatus.WAITING}
    assert TaskStatus.SUCCESS not in states.REQUEUEABLE
    assert TaskStatus.DEAD in states.REQUEUEABLE


def test_every_non_final_status_but_waiting_has_a_trigger_so_nothing_is_lost() -> None:
    for status in set(TaskStatus) - states.FINAL - {TaskStatus.WAITING}:
        assert states.next_trigger(status, now=NOW, timeouts=TIMEOUTS) is not None


def test_only_unclaimed_tasks_are_cancellable() -> None:
    assert {TaskStatus.NEW, TaskStatus.WAITING, TaskStatus.ENQUEUED,
                                  TaskStatus.RETRYING} == states.CANCELLABLE
    for status in states.CANCELLABLE:
        states.check_transition(status, TaskStatus.CANCELLED)
