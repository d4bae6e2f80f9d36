"""A remote worker's bound on the tasks it holds: its waiting claims count what they ask for,
and its token's ceiling counts every worker of the token."""

from __future__ import annotations

from typing import Any

import pytest

from tasks_api import held_tasks
from tasks_api.held_tasks import HeldTasksExceeded
from tasks_core.models import Worker
from tasks_core.remote_workers import Holding


def test_a_workers_waiting_claims_cannot_each_take_the_room_left(settings: Any) -> None:
    # Given a two-thread worker (a bound of 4) holding one task
    settings.ATF_API_HELD_TASKS_PER_THREAD = 2
    worker, other = Worker(worker_id="w:1", threads=2), Worker(worker_id="w:2", threads=2)
    # When one of its claims waits for up to 10 tasks, it may take the 3 its bound leaves
    with held_tasks.waiting(worker, 10, held=1) as asked:
        assert asked == 3
        # Then its next claim, waiting or not, gets none (naming the setting)
        room = held_tasks.room_left(worker, 1, Holding(worker=1, token=1))
        assert (room.count, room.setting) == (0, "ATF_API_HELD_TASKS_PER_THREAD")
        with (pytest.raises(HeldTasksExceeded, match="ATF_API_HELD_TASKS_PER_THREAD allows 2"),
              held_tasks.waiting(worker, 1, held=1)):
            pass
        # And another worker's claims are not counted against it
        assert held_tasks.room_left(other, 10, Holding(worker=0, token=1)).count == 4
    # And once the waiting claim ended, the room is the worker's again
    assert held_tasks.room_left(worker, 10, Holding(worker=1, token=1)).count == 3


def test_the_tokens_ceiling_counts_every_worker_of_the_token(settings: Any) -> None:
    # Given a ceiling of 6 for a token whose workers hold 5, one of them none
    settings.ATF_API_HELD_TASKS_PER_THREAD = 2
    settings.ATF_API_HELD_TASKS_PER_TOKEN = 6
    worker = Worker(worker_id="w:3", threads=4)
    # Then a claim of that worker gets the one task the ceiling leaves, naming the ceiling
    room = held_tasks.room_left(worker, 8, Holding(worker=0, token=5))
    assert (room.count, room.setting) == (1, "ATF_API_HELD_TASKS_PER_TOKEN")
    assert "ATF_API_HELD_TASKS_PER_TOKEN allows 6" in str(
        HeldTasksExceeded(worker, room.setting).detail)


def test_no_bound_lets_every_claim_through(settings: Any) -> None:
    settings.ATF_API_HELD_TASKS_PER_THREAD = 0
    settings.ATF_API_HELD_TASKS_PER_TOKEN = 0
    worker = Worker(worker_id="w:1", threads=1)
    assert held_tasks.room_left(worker, 50, Holding(worker=1_000, token=1_000)).count == 50
