"""What remote workers hold (the worker API's bound reads it per claim): one statement on
PostgreSQL that counts no further than the bound, the same counts as the ORM's."""

from __future__ import annotations

import pytest
from django.utils import timezone

from tasks_core.models import TaskEntity, Worker
from tasks_core.states import TaskStatus
from tasks_core.store import Lease
from tasks_core.store.backends.orm import OrmBackend
from tasks_core.store.backends.postgres import PostgresBackend
from tests.factories import LambdaFactory, TaskFactory

pytestmark = pytest.mark.django_db

BACKENDS = [PostgresBackend(), OrmBackend()]


def _worker(worker_id: str, credential: str) -> None:
    now = timezone.now()
    Worker.objects.create(worker_id=worker_id, host="h", pid=1, lambdas=[], threads=1,
                          started_at=now, last_seen=now, credential=credential)


def _held(worker: str, status: TaskStatus, count: int) -> list[TaskEntity]:
    lam = LambdaFactory()
    return [TaskFactory(lambda_ref=lam, status=status, worker=worker, lease=7)
            for _ in range(count)]


@pytest.fixture
def fleet() -> list[TaskEntity]:
    """Token A's workers w1 (2 claimed, 3 processing) and w2 (4 processing); token B's w3
    (5 processing); w1's finished task is not held."""
    _worker("w1", "token:A")
    _worker("w2", "token:A")
    _worker("w3", "token:B")
    _held("w1", TaskStatus.CLAIMED, 2)
    processing = _held("w1", TaskStatus.PROCESSING, 3)
    _held("w2", TaskStatus.PROCESSING, 4)
    _held("w3", TaskStatus.PROCESSING, 5)
    _held("w1", TaskStatus.SUCCESS, 1)
    return processing


@pytest.mark.parametrize("backend", BACKENDS, ids=["postgres", "orm"])
def test_a_worker_and_its_tokens_workers_hold_their_claimed_and_processing_tasks(
        backend: OrmBackend, fleet: list[TaskEntity]) -> None:
    assert backend.held("w1", []) == (5, 0)
    assert backend.held("w1", [], credential="token:A") == (5, 9)
    assert backend.held("w3", [], credential="token:B") == (5, 5)


@pytest.mark.parametrize("backend", BACKENDS, ids=["postgres", "orm"])
def test_tasks_that_end_now_at_their_lease_are_taken_off(backend: OrmBackend,
                                                         fleet: list[TaskEntity]) -> None:
    first, second, _third = fleet
    ending = [Lease(first.pk, 7), Lease(second.pk, 6)]  # the second's lease moved on
    assert backend.held("w1", ending, credential="token:A") == (4, 8)
    # Another worker's processing task does not free w1's room
    assert backend.held("w2", [Lease(first.pk, 7)], credential="token:A") == (4, 9)


def test_the_statement_stops_counting_past_the_bound(fleet: list[TaskEntity]) -> None:
    first = fleet[0]
    # With bounds of 1 (and one task ending), each count stops at 2, less the ending one:
    # the caller learns that the bound is reached, no more
    held = PostgresBackend().held("w1", [Lease(first.pk, 7)], credential="token:A",
                                  worker_most=1, token_most=1)
    assert held == (1, 1)
    # Bounds above what is held count it all
    assert PostgresBackend().held("w1", [], credential="token:A", worker_most=50,
                                  token_most=50) == (5, 9)
