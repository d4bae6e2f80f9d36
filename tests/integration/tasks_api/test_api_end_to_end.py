"""A task followed through the API to its outcome, with a real consumer and worker running."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from tests.conftest import Processes, subprocess_env, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

FINAL = {"success", "fatal_failure", "dead", "cancelled", "dropped"}


@pytest.fixture
def demo_client(redis_client: object) -> APIClient:
    out = io.StringIO()
    call_command("atf_token", "demo", "demo-user", stdout=out, stderr=io.StringIO())
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {out.getvalue().split()[-1]}")
    return client


def _finished(client: APIClient, task_id: int) -> dict[str, Any] | None:
    task = client.get(f"/api/v1/tasks/{task_id}/").json()
    return task if task["status"] in FINAL else None


def test_tasks_scheduled_through_the_api_run_and_report_back(
        processes: Processes, demo_client: APIClient) -> None:
    # Given a consumer and a worker for the demo lambdas
    env = subprocess_env(ATF_POLL_INTERVAL_S="0.2")
    processes.start("runconsumer", env=env)
    processes.start("runworker", "demo.noop", "demo.fail", "--threads", "2", env=env)
    # When a task that succeeds and one that fails for good are scheduled through the API
    ok = demo_client.post("/api/v1/tasks/", {"lambda": "demo.noop", "payload": {"x": 1}},
                          format="json").json()
    bad = demo_client.post("/api/v1/tasks/", {"lambda": "demo.fail",
                                              "payload": {"mode": "fatal"}},
                           format="json").json()
    # Then the API reports their outcomes, results and errors
    done = wait_for(lambda: _finished(demo_client, ok["id"]), timeout_s=60,
                    message="demo.noop to finish")
    assert (done["status"], done["result"], done["attempts"]) == ("success", {}, 1)
    assert done["started_at"] and done["finished_at"] and done["worker"]
    failed = wait_for(lambda: _finished(demo_client, bad["id"]), timeout_s=60,
                      message="demo.fail to finish")
    assert failed["status"] == "fatal_failure"
    assert failed["last_error"]["message"] == "demo.fail asked to fail for good"
    # And the stats and metrics count them, with a delivery latency
    stats = demo_client.get("/api/v1/stats/").json()
    assert stats["counts"]["success"] == 1
    assert stats["counts"]["fatal_failure"] == 1
    assert stats["delivery_latency"]["count"] == 2
    assert stats["live_workers"] >= 1
    metrics = demo_client.get("/metrics").content.decode()
    assert 'atf_tasks{lambda="demo.noop",status="success"} 1.0' in metrics
    assert 'atf_delivery_latency_seconds_gcount 2.0' in metrics
