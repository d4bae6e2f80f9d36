"""The worker's buffer: how many tasks the controller may claim, and who gets them first."""

from __future__ import annotations

from tasks_core.store import ClaimedTask
from workers.buffer import WorkBuffer

PRIORITIES = ["high", "default", "low"]


def task(task_id: int, priority: str = "default") -> ClaimedTask:
    return ClaimedTask(task_id=task_id, lease=1, lambda_name="demo.noop", collection="default",
                       priority=priority, payload={}, attempt=1, max_attempts=3)


def test_the_controller_claims_only_for_executors_with_nothing_to_run_next() -> None:
    buffer = WorkBuffer(priorities=PRIORITIES, executors=2)
    assert buffer.free_slots() == 2
    buffer.put([task(1), task(2)])
    assert buffer.free_slots() == 0  # buffered tasks fill the slots
    first, second = buffer.take(timeout_s=0), buffer.take(timeout_s=0)
    assert buffer.free_slots() == 0  # an executor waiting for its start still holds a slot
    buffer.begin(first, 0.0)
    buffer.begin(second, 0.0)
    assert buffer.free_slots() == 0
    # The first lambda returns: while its result is written, its executor counts as free
    assert buffer.finishing(first) is False
    assert buffer.free_slots() == 1
    buffer.put([task(3)])
    assert buffer.free_slots() == 0
    # The write ends: the slot was already handed on, so nothing more is free
    buffer.end(first)
    assert buffer.free_slots() == 0


def test_a_task_that_never_started_gives_its_slot_back() -> None:
    buffer = WorkBuffer(priorities=PRIORITIES, executors=1)
    buffer.put([task(1)])
    taken = buffer.take(timeout_s=0)
    assert buffer.free_slots() == 0
    buffer.end(taken)  # its lease had moved on: the start was refused
    assert buffer.free_slots() == 1


def test_executors_take_the_highest_priority_first_and_a_closed_buffer_hands_back() -> None:
    buffer = WorkBuffer(priorities=PRIORITIES, executors=4)
    buffer.put([task(1, "low"), task(2, "default"), task(3, "high")])
    assert buffer.take(timeout_s=0).task_id == 3
    assert [t.task_id for t in buffer.close()] == [2, 1]
    assert buffer.take(timeout_s=1) is None
