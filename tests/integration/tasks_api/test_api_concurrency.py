"""Idempotent scheduling through the API under concurrency: many requests, one key, one task."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.db import connection
from rest_framework.test import APIClient

from tasks_core.models import TaskEntity
from tests.integration.tasks_api.test_api_support import member

THREADS = 20


@pytest.mark.django_db(transaction=True)
def test_twenty_concurrent_requests_with_one_key_make_one_task() -> None:
    # Given a team member, and twenty clients that start together
    key = member("alpha").token
    start = threading.Barrier(THREADS)

    def post(n: int) -> tuple[int, Any]:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
        try:
            start.wait(timeout=30)
            response = client.post("/api/v1/tasks/", {
                "lambda": "alpha.work", "payload": {"n": n}, "idempotency_key": "once",
            }, format="json")
            body = response.json()
            return response.status_code, body.get("id", body)
        finally:
            connection.close()  # each thread has its own connection

    # When they all schedule with the same idempotency key
    with ThreadPoolExecutor(THREADS) as pool:
        results = list(pool.map(post, range(THREADS)))
    # Then exactly one request created the task, and every one got that task back
    codes = sorted(code for code, _id in results)
    assert codes == [200] * (THREADS - 1) + [201], results
    assert len({task_id for _code, task_id in results}) == 1
    assert TaskEntity.objects.filter(idempotency_key="once").count() == 1
