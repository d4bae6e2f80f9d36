"""A remote worker's bound on the tasks it holds: its waiting claims count what they ask for."""

from __future__ import annotations

from typing import Any

import pytest

from tasks_api import held_tasks
from tasks_api.held_tasks import HeldTasksExceeded
from tasks_core.models import Worker


def test_a_workers_waiting_claims_cannot_each_take_the_room_left(settings: Any) -> None:
    # Given a two-thread worker (a bound of 4) holding one task
    settings.ATF_API_HELD_TASKS_PER_THREAD = 2
    worker, other = Worker(worker_id="w:1", threads=2), Worker(worker_id="w:2", threads=2)
    # When one of its claims waits for up to 10 tasks, it may take the 3 its bound leaves
    with held_tasks.waiting(worker, 10, held=1) as asked:
        assert asked == 3
        # Then its next claim, waiting or not, gets none (refused naming the setting)
        with pytest.raises(HeldTasksExceeded, match="ATF_API_HELD_TASKS_PER_THREAD allows 2"):
            held_tasks.claimable(worker, 1, held=1, carries_results=False)
        with pytest.raises(HeldTasksExceeded), held_tasks.waiting(worker, 1, held=1):
            pass
        # ...unless it carries results: those are recorded, and it claims nothing
        assert held_tasks.claimable(worker, 1, held=1, carries_results=True) == 0
        # And another worker's claims are not counted against it
        assert held_tasks.claimable(other, 10, held=0, carries_results=False) == 4
    # And once the waiting claim ended, the room is the worker's again
    assert held_tasks.claimable(worker, 10, held=1, carries_results=False) == 3


def test_no_bound_lets_every_claim_through(settings: Any) -> None:
    settings.ATF_API_HELD_TASKS_PER_THREAD = 0
    worker = Worker(worker_id="w:1", threads=1)
    assert held_tasks.claimable(worker, 50, held=1_000, carries_results=False) == 50
