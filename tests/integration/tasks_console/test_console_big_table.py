"""The task list stays fast on a big table: 1,000,000 rows, no full COUNT, indexed filters."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from tasks_core.models import TaskEntity
from tests.factories import LambdaFactory

pytestmark = [pytest.mark.slow, pytest.mark.drill, pytest.mark.django_db]

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


@dataclass(frozen=True, kw_only=True)
class Timing:
    """One page load: wall clock, this process's CPU, and SQL (as the database answered)."""

    wall_s: float
    cpu_s: float
    sql_s: float

    @property
    def cost_s(self) -> float:
        """What the page costs without waiting for a CPU: on an idle machine, its wall time."""
        return self.cpu_s + self.sql_s


def timed_get(client: Client, url: str, params: dict[str, str]) -> Timing:
    with CaptureQueriesContext(connection) as queries:
        wall, cpu = time.perf_counter(), time.process_time()
        response = client.get(url, params)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert response.status_code == 200, (url, params)
    sql = sum(float(query["time"]) for query in queries.captured_queries)
    return Timing(wall_s=wall, cpu_s=cpu, sql_s=sql)


def measure(client: Client, pages: dict[str, tuple[str, dict[str, str]]]) -> dict[str, Timing]:
    """name -> the median of three loads of each page (by cost)."""
    timings = {}
    for name, (url, params) in pages.items():
        runs = sorted((timed_get(client, url, params) for _ in range(3)),
                      key=lambda t: t.cost_s)
        timings[name] = runs[1]
    return timings


def table(timings: dict[str, Timing]) -> str:
    return "\n".join(f"  {name:<16} wall {t.wall_s * 1000:7.1f} ms   CPU {t.cpu_s * 1000:6.1f} ms"
                     f"   SQL {t.sql_s * 1000:6.1f} ms" for name, t in timings.items())


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
    print(f"\ntask list with {ROWS} rows, the median of 3 loads of each page:\n{report}\n"
          f"scanning pages:\n{table(measure(admin_client, scanning))}")
    # Then every one costs well under a second (CPU + SQL: the wall clock of a machine shared
    # with other test runs also counts the time spent waiting for a CPU)
    assert max(t.cost_s for t in timings.values()) < BUDGET_S, report
