"""The task list stays fast on a big table: 1,000,000 rows, no full COUNT, indexed filters."""

from __future__ import annotations

import os
import statistics
import time

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from tasks_core.models import TaskEntity
from tests.factories import LambdaFactory

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

#: Rows inserted; the issue asks for a million.
ROWS = int(os.environ.get("ATF_CONSOLE_BIG_ROWS", "1000000"))
#: The time budget of one page load, in seconds ("well under a second").
BUDGET_S = 1.0
TASKS = reverse("admin:tasks_core_taskentity_changelist")
DEAD = reverse("admin:tasks_console_deadletter_changelist")


def insert_tasks(lambda_ids: list[int], rows: int) -> None:
    """`rows` tasks over 30 days: 90% success, 5% new, 3% retrying, 1% dead, 1% cancelled."""
    table = TaskEntity._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            INSERT INTO {table} (lambda_ref_id, collection, priority, payload, status, attempts,
                max_attempts, run_at, lease, worker, created_at, finished_at, last_error)
            SELECT (%(lambdas)s::bigint[])[1 + n %% cardinality(%(lambdas)s::bigint[])],
                   CASE WHEN n %% 10 = 0 THEN 'marketing' ELSE 'default' END,
                   (ARRAY['high', 'default', 'low'])[1 + n %% 3],
                   jsonb_build_object('n', n),
                   CASE WHEN n %% 100 = 0 THEN 'dead' WHEN n %% 100 = 1 THEN 'cancelled'
                        WHEN n %% 100 < 5 THEN 'retrying' WHEN n %% 100 < 10 THEN 'new'
                        ELSE 'success' END,
                   1, 3, at, 1, '', at, at,
                   CASE WHEN n %% 100 = 0 THEN jsonb_build_object(
                       'type', 'ValueError', 'message', 'bad row ' || n, 'traceback', '')
                   END
            FROM (SELECT n, %(now)s::timestamptz - (%(rows)s - n) * interval '2.592 seconds'
                         * (1000000.0 / %(rows)s) AS at
                  FROM generate_series(1, %(rows)s) AS n) AS s
            """,  # noqa: S608 -- the table name is ours
            {"lambdas": lambda_ids, "rows": rows, "now": timezone.now()},
        )
        cursor.execute(f"ANALYZE {table}")


def timed_get(client: Client, url: str, params: dict[str, str]) -> tuple[float, float]:
    """Seconds of one page load, and the seconds of it spent in SQL."""
    with CaptureQueriesContext(connection) as queries:
        started = time.perf_counter()
        response = client.get(url, params)
        elapsed = time.perf_counter() - started
    assert response.status_code == 200, (url, params)
    return elapsed, sum(float(query["time"]) for query in queries.captured_queries)


def measure(client: Client, pages: dict[str, tuple[str, dict[str, str]]],
            ) -> dict[str, tuple[float, float]]:
    """name -> (median page seconds, median SQL seconds) of three loads of each page."""
    timings = {}
    for name, (url, params) in pages.items():
        runs = [timed_get(client, url, params) for _ in range(3)]
        timings[name] = (statistics.median(r[0] for r in runs),
                         statistics.median(r[1] for r in runs))
    return timings


def table(timings: dict[str, tuple[float, float]]) -> str:
    return "\n".join(f"  {name:<16} {page * 1000:7.1f} ms   (SQL {sql * 1000:6.1f} ms)"
                     for name, (page, sql) in timings.items())


@pytest.mark.timeout(900)
def test_task_list_of_a_million_rows_opens_well_under_a_second(admin_client: Client) -> None:
    # Given a million tasks of four lambdas
    lambdas = [LambdaFactory().pk for _ in range(4)]
    insert_tasks(lambdas, ROWS)
    midnight = timezone.now().replace(hour=0, minute=0, second=0, microsecond=0)
    opening = {
        "all tasks": (TASKS, {}),
        "status=dead": (TASKS, {"status__exact": "dead"}),
        "status=new": (TASKS, {"status__exact": "new"}),
        "one lambda": (TASKS, {"lambda": str(lambdas[1])}),
        "lambda+status": (TASKS, {"lambda": str(lambdas[1]), "status__exact": "retrying"}),
        "collection": (TASKS, {"collection": "marketing"}),
        "priority": (TASKS, {"priority": "low"}),
        "page 100": (TASKS, {"p": "100"}),
        "search by id": (TASKS, {"q": str(ROWS // 2)}),
        "dead letters": (DEAD, {}),
    }
    # Reported, not held to the budget: both scan rows that no index covers (see the README).
    scanning = {
        "created today": (TASKS, {"created_at__gte": str(midnight)}),
        "search error": (TASKS, {"q": f"bad row {ROWS // 2}"}),
    }
    admin_client.get(TASKS)  # templates and connections warm up once
    # When each page loads three times
    timings = measure(admin_client, opening)
    report = table(timings)
    print(f"\ntask list with {ROWS} rows, median of 3 page loads:\n{report}\n"
          f"scanning pages:\n{table(measure(admin_client, scanning))}")
    # Then every one is well under a second
    assert max(page for page, _sql in timings.values()) < BUDGET_S, report
