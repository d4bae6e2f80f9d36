"""atf_client against the real API, served by Django's live server on the test database."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pytest_django.live_server_helper import LiveServer

import atf_client
from atf_client import Call, Client
from tasks_core.models import TaskEntity
from tasks_core.states import TaskStatus
from tests.conftest import wait_for
from tests.factories import TaskFactory
from tests.integration.tasks_api.test_api_support import Member

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def client(live_server: LiveServer, alice: Member) -> Iterator[Client]:
    # The base URL `runworker --api` takes: the client adds api/
    with Client(live_server.url, alice.token) as client:
        yield client


def test_schedule_get_and_cancel(client: Client, alice: Member) -> None:
    # Given a task scheduled through the client with options
    run_at = datetime.now(UTC) + timedelta(hours=1)
    task = client.schedule(alice.lam.name, {"order": 7}, collection="monthly",
                           priority="high", run_at=run_at, max_attempts=2)
    # Then it is in the store as the client shows it
    stored = TaskEntity.objects.get(pk=task.id)
    assert (task.lambda_name, task.collection, task.priority, task.status) == (
        alice.lam.name, "monthly", "high", "new")
    assert task.payload == stored.payload == {"order": 7}
    assert task.run_at == stored.run_at == run_at.replace(microsecond=task.run_at.microsecond)
    assert task.max_attempts == 2 and task.data["id"] == task.id
    # When it is read and cancelled
    assert client.get(task.id).status == "new"
    cancelled = client.cancel(task.id)
    # Then the store has it cancelled, and a second cancel is a conflict
    assert cancelled.status == "cancelled"
    assert TaskEntity.objects.get(pk=task.id).status == TaskStatus.CANCELLED
    with pytest.raises(atf_client.Conflict) as caught:
        client.cancel(task.id)
    assert caught.value.status == 409 and caught.value.detail


def test_an_idempotency_key_gives_back_the_first_task(client: Client, alice: Member) -> None:
    first = client.schedule(alice.lam.name, {"n": 1}, idempotency_key="order-7")
    again = client.schedule(alice.lam.name, {"n": 2}, idempotency_key="order-7", delay=30)
    assert again.id == first.id and again.payload == {"n": 1}
    assert TaskEntity.objects.count() == 1


def test_schedule_many_creates_all_in_order(client: Client, alice: Member) -> None:
    tasks = client.schedule_many([Call(lambda_name=alice.lam.name, payload={"n": n},
                                       priority="low") for n in range(3)])
    assert [task.payload for task in tasks] == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert sorted(TaskEntity.objects.values_list("pk", flat=True)) == [t.id for t in tasks]


def test_field_errors_come_back_on_the_exception(client: Client, alice: Member) -> None:
    # A single task with a bad priority and both timings
    with pytest.raises(atf_client.InvalidRequest) as caught:
        client.schedule(alice.lam.name, priority="urgent", delay=5,
                        run_at=datetime.now(UTC))
    assert caught.value.status == 400
    assert set(caught.value.errors) == {"priority", "run_at"}, caught.value.errors
    assert all(isinstance(msgs, list) and msgs for msgs in caught.value.errors.values())
    # A batch with one bad item: the item's errors by index, and nothing created
    with pytest.raises(atf_client.InvalidRequest) as caught:
        client.schedule_many([Call(lambda_name=alice.lam.name),
                              Call(lambda_name="no.such.lambda")])
    assert list(caught.value.errors) == ["tasks[1].lambda"]
    assert TaskEntity.objects.count() == 0


def test_other_teams_and_bad_tokens_are_refused(live_server: LiveServer, client: Client,
                                                bob: Member) -> None:
    bobs = TaskFactory(lambda_ref=bob.lam)
    with pytest.raises(atf_client.InvalidRequest):  # as an unknown lambda would be
        client.schedule(bob.lam.name)
    with pytest.raises(atf_client.NotFound):
        client.get(bobs.pk)
    with pytest.raises(atf_client.NotFound):
        client.cancel(bobs.pk)
    with Client(f"{live_server.url}/api/", "not-a-token") as stranger, \
            pytest.raises(atf_client.Unauthorized):
        stranger.get(bobs.pk)


def test_a_refused_call_leaves_no_connection_open_once_the_client_is_closed(
        live_server: LiveServer, alice: Member) -> None:
    # Given a client whose call the API refused, its error still held (as a caller keeps it)
    earlier = set(_request_threads())
    with Client(live_server.url, alice.token) as client, \
            pytest.raises(atf_client.NotFound) as caught:
        client.get(999_999)
    # When the client has been closed, Then the server's end of its connection is gone: its
    # thread ended, and let go of its database connection (the error keeps no response open)
    wait_for(lambda: not set(_request_threads()) - earlier, timeout_s=5,
             message="the live server's request threads ended")
    assert caught.value.status == 404


def _request_threads() -> list[threading.Thread]:
    """The live server's threads that serve a connection (Django's ThreadedWSGIServer)."""
    return [thread for thread in threading.enumerate()
            if thread.name.endswith("(process_request_thread)")]


def test_an_unreachable_server_is_a_transport_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with Client(f"http://127.0.0.1:{port}/api/", "t", timeout=2) as client, \
            pytest.raises(atf_client.TransportError):
        client.get(1)


def test_the_options_reach_the_task_and_the_old_delay_s_still_works(client: Client,
                                                                    alice: Member) -> None:
    # When a task is scheduled with a delay and a time limit
    task = client.schedule(alice.lam.name, delay=60, timeout=2.5, max_attempts=2)
    row = TaskEntity.objects.get(pk=task.id)
    assert (row.timeout_s, row.max_attempts) == (2.5, 2)
    assert 55 <= (row.run_at - row.created_at).total_seconds() <= 65
    # ...and with the older spelling of the delay, it warns and means the same
    with pytest.warns(DeprecationWarning, match="delay="):
        old = client.schedule(alice.lam.name, delay_s=60)
    row = TaskEntity.objects.get(pk=old.id)
    assert 55 <= (row.run_at - row.created_at).total_seconds() <= 65


def test_the_older_spellings_of_seconds_warn_and_mean_the_same(client: Client,
                                                                alice: Member) -> None:
    with pytest.warns(DeprecationWarning, match="use timeout="):
        old = Client("http://127.0.0.1:1/", "t", timeout_s=3)
    assert old.timeout == 3
    with pytest.warns(DeprecationWarning, match="use interval="):
        added = client.add_periodic("nightly", alice.lam.name, interval_s=60)
    assert added["interval"] == 60
    with pytest.warns(DeprecationWarning, match="use interval="):
        changed = client.change_periodic("nightly", interval_s=30)
    assert changed["interval"] == 30


@pytest.mark.parametrize(("url", "api"), [
    ("https://atf.example.com", "https://atf.example.com/api/"),
    ("https://atf.example.com/", "https://atf.example.com/api/"),
    ("https://shop.example.com/atf", "https://shop.example.com/atf/api/"),
    ("https://atf.example.com/api/", "https://atf.example.com/api/"),  # the API's own URL
    ("https://atf.example.com/api", "https://atf.example.com/api/"),
])
def test_the_client_takes_the_base_url_runworker_api_takes(url: str, api: str) -> None:
    assert atf_client.client.api_url(url) == api


def test_a_throttled_request_is_tried_again_after_retry_after(
        live_server: LiveServer, alice: Member, settings: Any) -> None:
    # Given a server that allows two requests a second per token
    settings.ATF_API_THROTTLE_RATE = "2/s"
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        time.sleep(seconds)

    task = TaskFactory(lambda_ref=alice.lam)
    # When the client reads a task five times in a row
    with Client(live_server.url, alice.token, sleep=sleep) as client:
        statuses = [client.get(task.pk).status for _ in range(5)]
    # Then every read succeeded, after waiting what the server's Retry-After said
    assert statuses == ["new"] * 5
    assert waits and all(0 < wait <= 1 for wait in waits)
    # ...and with retries off, the 429 comes back at once, with its Retry-After
    with Client(live_server.url, alice.token, retries=atf_client.NO_RETRIES) as client, \
            pytest.raises(atf_client.Throttled) as caught:
        for _ in range(5):
            client.get(task.pk)
    assert caught.value.status == 429 and caught.value.retry_after_s is not None


@pytest.mark.parametrize(("retry", "retry_after_s", "wait_s"), [
    (1, 3.0, 3.0),  # the server's word
    (1, 120.0, 30.0),  # ...capped
    (1, None, 0.375),  # backoff: half to all of 0.5 s (rand 0.5)
    (3, None, 1.5),  # doubling
    (10, None, 22.5),  # capped at 30 s, times the jitter
])
def test_the_wait_before_a_retry(retry: int, retry_after_s: float | None,
                                 wait_s: float) -> None:
    policy = atf_client.RetryPolicy()
    assert policy.wait_s(retry, retry_after_s, rand=lambda: 0.5) == pytest.approx(wait_s)


def test_the_operator_api(client: Client, alice: Member) -> None:
    # Gates: pause a collection, then the lambda, then open it
    assert client.set_gate(alice.lam.name, "paused", collection="bulk")["gate"] == "paused"
    until = datetime.now(UTC) + timedelta(hours=1)
    assert client.set_gate(alice.lam.name, "paused", until=until)["gate"] == "paused"
    assert client.set_gate(alice.lam.name, "open")["gate"] == "open"
    # Options: an override and its clearing
    assert client.set_options(alice.lam.name, quota=20)["quota"]["source"] == "operator"
    assert client.lambda_info(alice.lam.name)["quota"]["value"] == 20
    assert client.set_options(alice.lam.name, quota=None)["quota"]["source"] == "code"
    # Dead letters: list, requeue by id, discard by lambda
    dead = [TaskFactory(lambda_ref=alice.lam, status=TaskStatus.DEAD) for _ in range(3)]
    assert sorted(task.id for task in client.dead_letters(lambda_name=alice.lam.name)) == \
        sorted(task.pk for task in dead)
    assert client.requeue_dead(ids=[dead[0].pk]) == 1
    assert client.discard_dead(lambda_name=alice.lam.name) == 2
    # One task: requeue a failed one, run a delayed one now, list by status
    failed = TaskFactory(lambda_ref=alice.lam, status=TaskStatus.FATAL_FAILURE)
    assert client.requeue(failed.pk).status == "new"
    later = client.schedule(alice.lam.name, delay=3600)
    assert client.run_now(later.id).run_at <= datetime.now(UTC)
    assert {task.id for task in client.tasks(status="new")} == {dead[0].pk, failed.pk, later.id}
    # Periodic tasks: add, change, list, delete
    client.add_periodic("nightly", alice.lam.name, cron="0 3 * * *")
    assert client.change_periodic("nightly", enabled=False)["enabled"] is False
    assert [row["name"] for row in client.periodic_tasks()] == ["nightly"]
    client.delete_periodic("nightly")
    assert client.periodic_tasks() == []
