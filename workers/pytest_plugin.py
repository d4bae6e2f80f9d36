"""ATF's pytest plugin: the `run_due_tasks` fixture (pytest loads it through the django-atf
distribution's `pytest11` entry point; a checkout names it in `pytest_plugins`).

    def test_an_order_sends_its_receipt(client, run_due_tasks):
        client.post("/orders/", {...})
        (outcome,) = run_due_tasks()
        assert outcome.status == "success"

Django is set up by pytest-django before any fixture runs, so this module imports nothing of
ATF's until the fixture is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Callable

    from workers.testing import TaskOutcome


@pytest.fixture
def run_due_tasks(db: None) -> Callable[..., list[TaskOutcome]]:
    """`workers.testing.run_due_tasks`, in a test with database access (pytest-django's `db`)."""
    from workers import testing

    return testing.run_due_tasks
