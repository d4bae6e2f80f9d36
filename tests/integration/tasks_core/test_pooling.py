"""ATF behind a connection pooler: a setting that needs the database session, behind a pooler
that does not keep it (PgBouncer in transaction mode), fails /readyz and the database check,
logs why, and prepares nothing; on a direct connection and in session mode all is well.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import connection
from rest_framework.test import APIClient

from tasks_core import atf, pooling
from tasks_core.conf import atf_settings
from tasks_core.models import Lambda, TaskEntity
from tasks_core.store import backends
from tests.conftest import Processes, race, subprocess_env, wait_for
from tests.integration.tasks_api.test_api_support import new_token
from tests.remote import start_api

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.pooled]


@pytest.fixture
def prepared_statements(database_route: str, redis_client: object) -> Iterator[str]:
    """ATF_DB_PREPARED_STATEMENTS on, over this test's route, probed afresh; then as it was.

    Set and put back here, as the route sets and puts back its own (tests.conftest's
    routed_database), not with pytest-django's `settings`: that one puts back the settings
    object it found, after the route had put back its value on the object in its place, so
    the session route's "on" outlived the test and went to every later test's processes."""
    before = atf_settings.db_prepared_statements
    settings.ATF_DB_PREPARED_STATEMENTS = True
    pooling.forget()
    backends.use(None)
    yield database_route
    settings.ATF_DB_PREPARED_STATEMENTS = before
    pooling.forget()
    backends.use(None)


def test_prepared_statements_behind_a_transaction_pooler_say_so_and_stay_off(
        prepared_statements: str, caplog: pytest.LogCaptureFixture) -> None:
    lost = prepared_statements == "pgbouncer-transaction"
    # When the API is asked whether it is ready
    ready = APIClient().get("/readyz")
    # Then behind the transaction-mode pooler it is not, and the log says why
    assert ready.status_code == (503 if lost else 200)
    assert ready.json()["checks"]["database"] == ("misconfigured" if lost else "ok")
    assert ("ATF_DB_PREPARED_STATEMENTS needs it" in caplog.text) is lost
    # And the store prepares nothing there, and elsewhere its statements are prepared on the
    # server session its connection keeps (Django opens connections with psycopg's prepares
    # off, which once left the setting doing nothing)
    assert backends.current().prepare is not lost  # type: ignore[attr-defined]
    atf.schedule("demo.noop", {})
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s",
                       ["%INSERT INTO tasks_core_taskentity%"])
        assert cursor.fetchone() == ((0,) if lost else (1,))
    # And the database check fails there with the same finding
    if lost:
        with pytest.raises(SystemCheckError, match="atf.E009"):
            call_command("check", databases=["default"])
    else:
        call_command("check", databases=["default"])


@pytest.mark.parametrize("asked", [None, False])
def test_with_the_defaults_every_route_is_ready_and_prepares_where_the_session_is_kept(
        database_route: str, asked: bool | None, redis_client: object) -> None:
    # Given the default (prepared wherever the session is kept), or prepares turned off
    before = atf_settings.db_prepared_statements
    settings.ATF_DB_PREPARED_STATEMENTS = asked
    pooling.forget()
    backends.use(None)
    try:
        # Then the API is ready on every route, and nothing is wrong
        assert APIClient().get("/readyz").json()["checks"]["database"] == "ok"
        assert pooling.problem() is None
        # And by default the store prepares its statements but behind the transaction-mode
        # pooler; turned off, nowhere
        kept = database_route != "pgbouncer-transaction"
        assert backends.current().prepare is (asked is None and kept)  # type: ignore[attr-defined]
    finally:
        settings.ATF_DB_PREPARED_STATEMENTS = before
        pooling.forget()
        backends.use(None)


def test_processes_with_a_pool_of_one_connection_answer_and_drain_from_their_first_requests(
        database_route: str, processes: Processes, redis_client: object) -> None:
    # Given the API, a consumer and a direct worker whose threads share a pool of one database
    # connection each (ATF_DB_POOL_SIZE), the store's statements not yet probed: each process
    # asks at its first store call, within a request or a consumer's turn that holds the pool's
    # one connection
    env = subprocess_env(ATF_DB_POOL_SIZE="1", ATF_POLL_INTERVAL_S="0.2")
    url = start_api(processes, env, threads=4)
    processes.start("runconsumer", env=env)
    demo = Lambda.objects.get(name="demo.noop")
    person = get_user_model().objects.create(username="pool-of-one")
    demo.team.members.add(person)
    token = new_token(person, demo.team)
    processes.start("runworker", "demo.noop", "--threads", "2", env=env)
    answers: list[int] = []

    def schedule() -> None:
        answers.append(requests.post(f"{url}/api/v1/tasks/", json={"lambda": demo.name},
                                     headers={"Authorization": f"Token {token}"},
                                     timeout=30).status_code)

    # When four requests that schedule arrive at once, as the API's first
    race(*[schedule] * 4)
    # Then each is answered 201: the probe took no connection of the pool (it once waited for
    # the one its own request held, and answered 503 after the pool's 10 s)
    assert answers == [201] * 4
    # And the consumer and the worker run the four tasks
    wait_for(lambda: TaskEntity.objects.filter(status="success").count() == 4, timeout_s=30,
             message="the four tasks to succeed")
