"""Console lists take only the filters they offer, and their queries run under a statement
timeout (ATF_CONSOLE_STATEMENT_TIMEOUT_MS): a lookup of one's own (`?payload__icontains=`, an
unindexed scan) is refused, and a list past the timeout answers 503 with a message."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from django.db import connection, transaction
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from tasks_core.models import Worker
from tests.factories import LambdaFactory, TaskFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db

TASKS = reverse("admin:tasks_core_taskentity_changelist")
DEAD = reverse("admin:tasks_console_deadletter_changelist")
ATTEMPTS = reverse("admin:tasks_core_taskattempt_changelist")
WORKERS = reverse("admin:tasks_core_worker_changelist")


@pytest.fixture
def member(client: Client) -> Client:
    lam = LambdaFactory(name="payments.charge", team=TeamFactory(name="payments"))
    user = UserFactory(is_staff=True)
    lam.team.members.add(user)
    TaskFactory(lambda_ref=lam, payload={"card": "4242"})
    client.force_login(user)
    return client


@pytest.mark.parametrize(("page", "lookup"), [
    (TASKS, "payload__icontains"), (TASKS, "result__contains"), (TASKS, "worker__icontains"),
    (DEAD, "last_error__message__icontains"), (ATTEMPTS, "error__icontains"),
    (WORKERS, "host__icontains"),
])
def test_a_lookup_the_list_does_not_offer_is_refused_before_any_scan(
        member: Client, page: str, lookup: str) -> None:
    # When a list is asked for with a lookup of the caller's own
    with CaptureQueriesContext(connection) as queries:
        response = member.get(page, {lookup: "42"})
    # Then it is refused, and no query filtered on that field
    assert response.status_code == 400
    field = lookup.split("__")[0]
    assert not any(f'"{field}"' in query["sql"].partition("WHERE")[2]
                   for query in queries.captured_queries), queries.captured_queries


@pytest.mark.parametrize(("page", "offered"), [
    (TASKS, {"status__exact": "new"}), (TASKS, {"created_at__gte": "2026-01-01"}),
    (TASKS, {"priority": "default"}), (DEAD, {"error_type": "E"}),
    (ATTEMPTS, {"outcome__exact": "success"}),
])
def test_the_filters_a_list_offers_still_filter(member: Client, page: str,
                                                offered: dict[str, str]) -> None:
    assert member.get(page, offered).status_code == 200


@pytest.fixture
def worker_table_locked() -> Iterator[None]:
    """Another connection holds the worker table locked, so a read of it waits."""
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(f"LOCK TABLE {Worker._meta.db_table} IN ACCESS EXCLUSIVE MODE")
                locked.set()
                release.wait(timeout=30)
        finally:
            connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    assert locked.wait(timeout=10)
    yield
    release.set()
    holder.join()


@override_settings(ATF_CONSOLE_STATEMENT_TIMEOUT_MS=200)
def test_a_list_past_the_statement_timeout_answers_503_with_a_message(
        member: Client, worker_table_locked: None) -> None:
    # When the workers list is asked for while its query cannot finish
    response = member.get(WORKERS)
    # Then the page answers 503 naming the setting, not a 500
    assert response.status_code == 503
    assert "ATF_CONSOLE_STATEMENT_TIMEOUT_MS" in response.content.decode()
    # And the connection is usable again: the timeout ended with the page's transaction
    with connection.cursor() as cursor:
        cursor.execute("SHOW statement_timeout")
        assert cursor.fetchone()[0] in ("0", "0ms")


def test_a_list_page_leaves_the_callers_statement_timeout_as_it_was(member: Client) -> None:
    # Given a list page served within a transaction of its caller's (here the test's)
    assert member.get(TASKS).status_code == 200
    # Then the page's timeout ended with the page
    with connection.cursor() as cursor:
        cursor.execute("SHOW statement_timeout")
        assert cursor.fetchone()[0] in ("0", "0ms")
