"""The worker's buffer: how many tasks the controller may claim, and who gets them first."""

from __future__ import annotations

import threading
import time

from tasks_core.context import AttemptStopped, ShardUnreachable, TaskCancelled, TimeLimitExceeded
from tasks_core.shards import SLOT_SHIFT
from tasks_core.store import ClaimedTask
from workers.buffer import WorkBuffer

PRIORITIES = ["high", "default", "low"]


def task(task_id: int, priority: str = "default", timeout_s: float | None = None) -> ClaimedTask:
    return ClaimedTask(task_id=task_id, lease=1, lambda_name="demo.noop", collection="default",
                       priority=priority, payload={}, attempt=1, max_attempts=3,
                       timeout_s=timeout_s, heartbeat_timeout_s=30.0)


def test_the_controller_claims_only_for_executors_with_nothing_to_run_next() -> None:
    buffer = WorkBuffer(priorities=PRIORITIES, executors=2)
    assert buffer.free_slots() == 2
    buffer.put([task(1), task(2)])
    assert buffer.free_slots() == 0  # buffered tasks fill the slots
    first, second = buffer.take(timeout_s=0), buffer.take(timeout_s=0)
    assert buffer.free_slots() == 0  # an executor that took a task holds its slot
    buffer.begin(first, 0.0, thread_id=0)
    buffer.begin(second, 0.0, thread_id=0)
    assert buffer.free_slots() == 0
    # The first lambda returns: its executor is free while its result is written
    assert buffer.finishing(first).discard is False
    assert buffer.free_slots() == 1
    buffer.put([task(3)])
    assert buffer.free_slots() == 0
    # The write ends: the slot was already handed on, so nothing more is free
    buffer.end(first)
    assert buffer.free_slots() == 0


def test_two_claims_in_flight_never_claim_for_the_same_free_executor() -> None:
    buffer = WorkBuffer(priorities=PRIORITIES, executors=3)
    # One controller's claim takes every free slot; another's finds none
    assert buffer.reserve() == 3
    assert buffer.reserve() == 0
    assert buffer.free_slots() == 0
    # The claim brings back fewer tasks than it asked for: the rest are free again
    buffer.put([task(1)], reserved=3)
    assert buffer.free_slots() == 2
    assert buffer.reserve() == 2
    buffer.put([], reserved=2)  # a claim that found nothing
    assert buffer.free_slots() == 2


def test_leases_cover_every_task_whose_end_is_not_durable() -> None:
    buffer = WorkBuffer(priorities=PRIORITIES, executors=3)
    buffer.put([task(1), task(2), task(3)])
    running, finished = buffer.take(timeout_s=0), buffer.take(timeout_s=0)
    buffer.begin(running, 0.0, thread_id=0)
    buffer.begin(finished, 0.0, thread_id=0)
    buffer.finishing(finished)
    # Waiting (started at its claim), running, and finished with its result being written
    assert set(buffer.leases()) == {1, 2, 3}
    # A heartbeat that finds the finished one's lease gone leaves it alone (its result write
    # tells), and drops the waiting one unrun
    assert {t.task_id for t in buffer.mark_lost({2, 3})} == {3}
    assert buffer.take(timeout_s=0) is None
    # Once its result is durable, the finished one is no longer renewed
    buffer.end(finished)
    assert set(buffer.leases()) == {1}


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


def busy_for(seconds: float) -> None:
    """A lambda busy in Python code. A function of its own, as the executor calls a lambda: on
    CPython 3.13.0 an asynchronous exception raised in a loop may skip a handler in the loop's
    own frame (CPython gh-139622) but is caught by its caller's."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        pass


def test_a_task_past_its_time_limit_is_interrupted_once_and_no_longer_heartbeated() -> None:
    # Given a task with a time limit of 1 s, run by a thread busy in Python code
    buffer = WorkBuffer(priorities=PRIORITIES, executors=1)
    buffer.put([task(1, timeout_s=1.0)])
    limited = buffer.take(timeout_s=0)
    raised = threading.Event()
    started = threading.Event()

    def lambda_thread() -> None:
        buffer.begin(limited, 0.0, thread_id=threading.get_ident())
        started.set()
        try:
            busy_for(10.0)
        except TimeLimitExceeded:
            raised.set()
            time.sleep(0.5)  # a lambda slow to return after its interrupt

    thread = threading.Thread(target=lambda_thread)
    thread.start()
    started.wait(5)
    # Before its deadline nothing happens
    assert buffer.stop_due(now_s=0.5) == []
    assert buffer.leases() == {1: 1}
    # At its deadline it is timed out once: interrupted, out of the heartbeat's leases
    (timed_out,) = buffer.stop_due(now_s=1.0)
    assert timed_out.task.task_id == 1
    assert buffer.stop_due(now_s=2.0) == []
    assert raised.wait(5)
    assert buffer.leases() == {}
    # It counts as hung once the grace has passed without its lambda returning
    assert buffer.hung(now_s=1.5, grace_s=1.0) == []
    assert [r.task.task_id for r in buffer.hung(now_s=2.0, grace_s=1.0)] == [1]
    thread.join(5)
    # Its lambda's own outcome is discarded; once it returned it is not hung
    assert buffer.finishing(limited).discard is True
    assert buffer.hung(now_s=9.0, grace_s=1.0) == []


def test_a_task_a_cancel_asks_to_stop_is_interrupted_at_once_without_a_time_limit() -> None:
    # Given a running task without a time limit, its lambda busy in Python code
    buffer = WorkBuffer(priorities=PRIORITIES, executors=1)
    buffer.put([task(1)])
    running = buffer.take(timeout_s=0)
    raised: list[BaseException] = []
    started = threading.Event()

    def lambda_thread() -> None:
        buffer.begin(running, 0.0, thread_id=threading.get_ident())
        started.set()
        try:
            busy_for(10.0)
        except AttemptStopped as exc:
            raised.append(exc)

    thread = threading.Thread(target=lambda_thread)
    thread.start()
    started.wait(5)
    assert buffer.stop_due(now_s=100.0) == []  # no limit: never timed out
    # When a heartbeat hears that a cancel asks to stop it
    assert [t.task_id for t in buffer.request_cancel({1, 99})] == [1]
    assert buffer.request_cancel({1}) == []  # heard once
    assert buffer.cancel_requested(1) is True  # what ctx.cancelled reads
    # Then the next stop interrupts it with TaskCancelled, once, and stops heartbeating it
    (stopped,) = buffer.stop_due(now_s=100.5)
    assert stopped.stopped_by is TaskCancelled
    assert buffer.stop_due(now_s=101.0) == []
    thread.join(5)
    assert [type(exc) for exc in raised] == [TaskCancelled]
    assert buffer.leases() == {}
    assert buffer.finishing(running).discard is True


def test_a_shard_the_heartbeat_cannot_reach_stops_its_own_tasks_and_no_other() -> None:
    # Given a running task on slot 1, one on slot 0, and one of slot 1 waiting
    on_one, on_zero, waiting = 1 << SLOT_SHIFT | 7, 8, 1 << SLOT_SHIFT | 9
    buffer = WorkBuffer(priorities=PRIORITIES, executors=3)
    buffer.put([task(on_one), task(on_zero), task(waiting)])
    first, second = buffer.take(timeout_s=0), buffer.take(timeout_s=0)
    raised: list[BaseException] = []
    started = [threading.Event(), threading.Event()]

    def lambda_thread(claimed: ClaimedTask, running: threading.Event) -> None:
        buffer.begin(claimed, 0.0, thread_id=threading.get_ident())
        try:
            running.set()
            busy_for(1.0)
        except AttemptStopped as exc:
            raised.append(exc)

    threads = [threading.Thread(target=lambda_thread, args=(claimed, running))
               for claimed, running in zip((first, second), started, strict=True)]
    for thread in threads:
        thread.start()
    assert all(running.wait(5) for running in started)
    # When the heartbeat cannot reach slot 1 for too long
    stopped, dropped = buffer.stop_shard(1, now_s=5.0)
    # Then slot 1's running task is interrupted and its waiting one dropped, slot 0's goes on
    assert [r.task.task_id for r in stopped] == [on_one]
    assert [t.task_id for t in dropped] == [waiting]
    assert buffer.stop_shard(1, now_s=6.0) == ([], [])  # once
    for thread in threads:
        thread.join(5)
    assert [type(exc) for exc in raised] == [ShardUnreachable]
    assert set(buffer.leases()) == {on_zero}
    assert buffer.finishing(first).discard is True
    assert buffer.running_on(1) == [] and buffer.running_on(0) != []
