"""Scheduling's paths timed in-process on the test database: a 1,000-item batch through the
batch endpoint (the view, DRF and the store) and through `atf.schedule_many`, and
`atf.schedule` one call at a time (each in its own transaction).

    ATF_TEST_DATABASE_NAME=... .venv/bin/pytest -q -s -p no:randomly bench/schedule_paths.py

Prints the median of `ROUNDS` rounds of each, wall and this process's CPU time (steadier on a
shared machine); figures go to docs/benchmarks.md.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import pytest
from django.db import transaction
from pytest_django.fixtures import Settings

from tasks_core import atf
from tasks_core.models import TaskEntity
from tests.integration.tasks_api.test_api_support import member

pytestmark = pytest.mark.django_db(transaction=True)

ROUNDS = 7
BATCH = 1000
SINGLE_CALLS = 500


def _median_ms(run: Callable[[], object]) -> tuple[float, float]:
    """Median wall and CPU (this process's: the view, DRF, scheduling; not PostgreSQL's)
    milliseconds of `run`."""
    wall, cpu = [], []
    for _ in range(ROUNDS):
        started, started_cpu = time.perf_counter(), time.process_time()
        run()
        wall.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - started_cpu) * 1000)
        TaskEntity.objects.all().delete()
    return statistics.median(wall), statistics.median(cpu)


def _report(name: str, run: Callable[[], object], per: int = 1) -> None:
    wall, cpu = _median_ms(run)
    print(f"{name}: {wall / per:.3f} ms wall, {cpu / per:.3f} ms CPU")


def test_scheduling_paths(settings: Settings) -> None:
    # What the paths take, not one team's share of the API: the bench's team is alone.
    settings.ATF_API_SCHEDULE_RATE_PER_TEAM = 0
    alice = member("bench")
    items = [{"lambda": alice.lam.name, "payload": {"order": i, "note": "x" * 40}}
             for i in range(BATCH)]

    def endpoint() -> None:
        response = alice.client.post("/api/v1/tasks/batch/", {"tasks": items}, format="json")
        assert response.status_code == 201, response.content[:300]

    def in_process() -> None:
        atf.schedule_many([atf.call(alice.lam.name, item["payload"]) for item in items])

    def one_by_one() -> None:
        for item in items[:SINGLE_CALLS]:
            atf.schedule(alice.lam.name, item["payload"])

    def in_transaction() -> None:
        with transaction.atomic():
            for item in items[:SINGLE_CALLS]:
                atf.schedule(alice.lam.name, item["payload"])

    endpoint(), in_process()  # warm the caches
    _report(f"batch endpoint, {BATCH} items", endpoint)
    _report(f"schedule_many, {BATCH} items", in_process)
    _report("schedule() in its own transaction, per call", one_by_one, SINGLE_CALLS)
    _report("schedule() in the caller's transaction, per call", in_transaction, SINGLE_CALLS)
