"""POST/GET /api/v1/tasks/…: scheduling, batches, reading, listing and cancelling."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings
from django.utils import timezone

from tasks_core import operations
from tasks_core.models import TaskAttempt, TaskEntity, Worker
from tasks_core.states import TaskStatus
from tests.factories import TaskFactory
from tests.integration.tasks_api.test_api_support import Member, member, schedule

pytestmark = pytest.mark.django_db

CONTRACT_FIELDS = [
    "id", "lambda", "collection", "priority", "status", "payload", "attempts", "max_attempts",
    "run_at", "created_at", "enqueued_at", "started_at", "finished_at", "heartbeat_at", "result",
    "last_error", "idempotency_key", "worker", "parents", "children", "timeout",
    "cancel_requested_at",
]


@pytest.fixture
def alice() -> Member:
    return member("alpha")


def test_schedule_answers_201_with_the_task(alice: Member) -> None:
    # Given a member of the team that owns a lambda
    # When it schedules a task with every option
    response = schedule(alice, payload={"order": 7}, collection="monthly", priority="high",
                        delay=300, idempotency_key="order-7", max_attempts=2)
    # Then the task is created, shaped as docs/contract.md lists it
    assert response.status_code == 201, response.json()
    body = response.json()
    assert list(body) == CONTRACT_FIELDS
    assert body["lambda"] == alice.lam.name
    assert (body["collection"], body["priority"], body["status"]) == ("monthly", "high", "new")
    assert body["payload"] == {"order": 7}
    assert (body["max_attempts"], body["idempotency_key"]) == (2, "order-7")
    run_at = datetime.fromisoformat(body["run_at"])
    created_at = datetime.fromisoformat(body["created_at"])
    assert timedelta(seconds=299) < run_at - created_at < timedelta(seconds=301)
    assert TaskEntity.objects.filter(pk=body["id"]).exists()


def test_schedule_with_a_time_limit(alice: Member) -> None:
    # When a task is scheduled with its own time limit, Then it is stored and shown
    response = schedule(alice, timeout=2.5)
    assert response.status_code == 201, response.json()
    assert response.json()["timeout"] == 2.5
    assert TaskEntity.objects.get(pk=response.json()["id"]).timeout_s == 2.5
    # ...without one it has none of its own, and 0 is its own "no limit"
    assert schedule(alice).json()["timeout"] is None
    assert schedule(alice, timeout=0).json()["timeout"] == 0
    # ...and a time limit that is not a number of seconds is a field error, nothing created
    for bad in (-0.5, -1, "soon"):
        response = schedule(alice, timeout=bad)
        assert response.status_code == 400
        assert "timeout" in response.json()
    assert TaskEntity.objects.count() == 3


def test_schedule_with_defaults(alice: Member) -> None:
    # When a task is scheduled with only its lambda
    response = schedule(alice)
    # Then it takes the default collection, priority, payload and the lambda's attempts
    assert response.status_code == 201
    body = response.json()
    assert (body["collection"], body["priority"], body["payload"]) == ("default", "default", {})
    assert body["max_attempts"] == alice.lam.max_attempts


def test_schedule_at_a_time(alice: Member) -> None:
    # When a task is scheduled at an ISO 8601 time
    response = schedule(alice, run_at="2030-01-02T03:04:05+02:00")
    # Then it runs then
    assert response.status_code == 201
    assert datetime.fromisoformat(response.json()["run_at"]) == datetime.fromisoformat(
        "2030-01-02T01:04:05+00:00")


def test_an_idempotency_key_used_again_answers_200_with_the_first_task(alice: Member) -> None:
    # Given a task scheduled with a key
    first = schedule(alice, payload={"n": 1}, idempotency_key="k1")
    # When the same key is used again
    again = schedule(alice, payload={"n": 2}, idempotency_key="k1")
    # Then the first task comes back, and no second one exists
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    assert again.json()["payload"] == {"n": 1}
    assert TaskEntity.objects.count() == 1


@pytest.mark.parametrize(("body", "field"), [
    ({"lambda": "no.such.lambda"}, "lambda"),
    ({"priority": "urgent"}, "priority"),
    ({"run_at": "2030-01-01T00:00:00Z", "delay": 5}, "run_at"),
    ({"run_at": "next tuesday"}, "run_at"),
    ({"delay": -1}, "delay"),
    ({"delay": "soon"}, "delay"),
    ({"payload": "x" * (300 * 1024)}, "payload"),
    ({"payload": {"bad": "nul\u0000"}}, "payload"),
    ({"idempotency_key": "k" * 201}, "idempotency_key"),
    ({"idempotency_key": "k" * 300}, "idempotency_key"),
    ({"idempotency_key": ""}, "idempotency_key"),
    ({"max_attempts": 0}, "max_attempts"),
    ({"collection": "c" * 101}, "collection"),
    ({"colection": "typo"}, "colection"),
    ({"lambda": None}, "lambda"),
    ({"lambda": ["alpha.work"]}, "lambda"),  # the fuzzer's 500: a list reached the scope check
    ({"lambda": {"name": "x"}}, "lambda"),
])
def test_bad_fields_answer_400_naming_the_field(alice: Member, body: dict[str, Any],
                                                 field: str) -> None:
    # When a task is scheduled with a bad field
    response = schedule(alice, **body)
    # Then the answer is 400 with a message on that field, and nothing is created
    assert response.status_code == 400, response.content
    errors = response.json()
    assert field in errors, errors
    assert all(isinstance(message, str) and message for message in errors[field])
    assert TaskEntity.objects.count() == 0


def test_a_missing_lambda_answers_400(alice: Member) -> None:
    response = alice.client.post("/api/v1/tasks/", {"payload": {}}, format="json")
    assert response.status_code == 400
    assert "lambda" in response.json()


def test_batch_creates_all_tasks_in_order(alice: Member) -> None:
    # When a batch of three tasks is posted
    tasks = [{"lambda": alice.lam.name, "payload": {"i": i}} for i in range(3)]
    response = alice.client.post("/api/v1/tasks/batch/", {"tasks": tasks}, format="json")
    # Then all are created and returned in order
    assert response.status_code == 201, response.json()
    assert [task["payload"] for task in response.json()["tasks"]] == [{"i": i} for i in range(3)]
    assert TaskEntity.objects.count() == 3


def test_a_batch_shows_each_task_as_reading_it_back_would(alice: Member) -> None:
    # Given an earlier task with a key, and a parent
    earlier = schedule(alice, idempotency_key="k1").json()
    parent = schedule(alice).json()
    # When a batch names the earlier key again (so answers with that task), and adds a task
    # after the earlier one and a task after the parent
    tasks = [{"lambda": alice.lam.name, "after": [earlier["id"]]},
             {"lambda": alice.lam.name, "idempotency_key": "k1"},
             {"lambda": alice.lam.name, "payload": {"p": 1}, "after": [parent["id"]],
              "priority": "high"}]
    response = alice.client.post("/api/v1/tasks/batch/", {"tasks": tasks}, format="json")
    assert response.status_code == 201, response.json()
    shown = response.json()["tasks"]
    # Then each is shown as GET shows it (the earlier one with its new child), history aside
    read = [alice.client.get(f"/api/v1/tasks/{task['id']}/").json() for task in shown]
    history = {"attempt_history", "attempt_history_count", "group", "progress", "steps"}
    assert shown == [{k: v for k, v in task.items() if k not in history} for task in read]
    assert shown[1]["id"] == earlier["id"] and shown[1]["children"] == [shown[0]["id"]]
    assert (shown[0]["parents"], shown[2]["parents"]) == ([earlier["id"]], [parent["id"]])


def test_batch_with_one_bad_item_creates_nothing(alice: Member) -> None:
    # When the third item of a batch names an unknown lambda and the second a bad time
    tasks = [{"lambda": alice.lam.name}, {"lambda": alice.lam.name, "run_at": "never"},
             {"lambda": "no.such"}]
    response = alice.client.post("/api/v1/tasks/batch/", {"tasks": tasks}, format="json")
    # Then the errors name the items, and nothing is created
    assert response.status_code == 400
    assert "tasks[1].run_at" in response.json()
    tasks[1].pop("run_at")
    response = alice.client.post("/api/v1/tasks/batch/", {"tasks": tasks}, format="json")
    assert response.status_code == 400
    assert list(response.json()) == ["tasks[2].lambda"]
    assert TaskEntity.objects.count() == 0


@pytest.mark.parametrize("name", ["send invoice", "billing/send", "alert!", "x" * 200 + "y"])
def test_a_malformed_lambda_name_answers_400_with_the_rule_as_an_unknown_one_does(
        alice: Member, name: str) -> None:
    rule = "is not a lambda name: use 1 to 200 ASCII letters, digits and _ - . :."
    # When a task, or a batch's second item, names a lambda no lambda could be called
    single = schedule(alice, **{"lambda": name})
    batch = alice.client.post("/api/v1/tasks/batch/",
                              {"tasks": [{"lambda": alice.lam.name}, {"lambda": name}]},
                              format="json")
    # Then the answer is the field's error, as for an unknown lambda, saying what a name may be
    assert (single.status_code, list(single.json())) == (400, ["lambda"])
    assert single.json()["lambda"][0].endswith(rule)
    assert (batch.status_code, list(batch.json())) == (400, ["tasks[1].lambda"])
    assert batch.json()["tasks[1].lambda"][0].endswith(rule)
    assert TaskEntity.objects.count() == 0


@override_settings(ATF_MAX_BATCH_SIZE=5)
def test_a_batch_over_the_limit_answers_400(alice: Member) -> None:
    tasks = [{"lambda": alice.lam.name}] * 6
    response = alice.client.post("/api/v1/tasks/batch/", {"tasks": tasks}, format="json")
    assert response.status_code == 400
    assert "5" in response.json()["tasks"][0]
    assert TaskEntity.objects.count() == 0


def test_a_full_batch_of_1000_is_accepted(alice: Member) -> None:
    tasks = [{"lambda": alice.lam.name, "payload": {"i": i}} for i in range(1000)]
    response = alice.client.post("/api/v1/tasks/batch/", {"tasks": tasks}, format="json")
    assert response.status_code == 201
    assert TaskEntity.objects.count() == 1000


@pytest.mark.parametrize("body", [{"tasks": []}, {"tasks": "x"}, {}, [1, 2]])
def test_batch_of_the_wrong_shape_answers_400(alice: Member, body: Any) -> None:
    response = alice.client.post("/api/v1/tasks/batch/", body, format="json")
    assert response.status_code == 400


def test_batch_repeating_a_key_answers_400(alice: Member) -> None:
    tasks = [{"lambda": alice.lam.name, "idempotency_key": "same"}] * 2
    response = alice.client.post("/api/v1/tasks/batch/", {"tasks": tasks}, format="json")
    assert response.status_code == 400
    assert "tasks[1].idempotency_key" in response.json()


def test_read_a_task(alice: Member) -> None:
    # Given a task that finished with a result
    task = TaskFactory(lambda_ref=alice.lam, status=TaskStatus.SUCCESS, result={"ok": True},
                       worker="host:1")
    # When it is read
    response = alice.client.get(f"/api/v1/tasks/{task.pk}/")
    # Then its status, result and worker show
    assert response.status_code == 200
    body = response.json()
    assert (body["id"], body["status"], body["result"], body["worker"]) == (
        task.pk, "success", {"ok": True}, "host:1")


def test_an_unknown_task_answers_404(alice: Member) -> None:
    assert alice.client.get("/api/v1/tasks/999999999/").status_code == 404
    assert alice.client.get("/api/v1/tasks/99999999999999999999999/").status_code == 404


def test_list_filters_and_pages_newest_first(alice: Member) -> None:
    # Given tasks in two collections and two statuses
    made = [TaskFactory(lambda_ref=alice.lam, collection="a" if i % 2 else "b")
            for i in range(5)]
    TaskFactory(lambda_ref=alice.lam, collection="a", status=TaskStatus.DEAD)
    # When the list is read two at a time, filtered on collection "a" and status new
    url = "/api/v1/tasks/?collection=a&status=new&page_size=1"
    ids = []
    while url:
        page = alice.client.get(url)
        assert page.status_code == 200, page.json()
        ids += [task["id"] for task in page.json()["results"]]
        url = page.json()["next"]
    # Then only those tasks come, newest first
    assert ids == sorted((t.pk for t in made if t.collection == "a"), reverse=True)


@pytest.mark.parametrize("query", ["status=sleeping", "colour=red", "lambda=%00"])
def test_a_bad_list_filter_answers_400(alice: Member, query: str) -> None:
    assert alice.client.get(f"/api/v1/tasks/?{query}").status_code == 400


def test_a_bad_cursor_answers_404(alice: Member) -> None:
    response = alice.client.get("/api/v1/tasks/?cursor=bm9wZQ")
    assert response.status_code == 404
    assert "detail" in response.json()


def test_filter_on_lambda_and_priority(alice: Member) -> None:
    other = member("alpha", lambda_name="alpha.other").lam
    high = TaskFactory(lambda_ref=alice.lam, priority="high")
    TaskFactory(lambda_ref=alice.lam, priority="low")
    TaskFactory(lambda_ref=other, priority="high")
    response = alice.client.get(f"/api/v1/tasks/?lambda={alice.lam.name}&priority=high")
    assert [task["id"] for task in response.json()["results"]] == [high.pk]


@pytest.mark.parametrize("status", ["new", "waiting", "enqueued", "retrying", "claimed"])
def test_cancel_a_task_nobody_runs(alice: Member, status: str) -> None:
    # Given a task nobody runs yet
    task = TaskFactory(lambda_ref=alice.lam, status=status)
    # When it is cancelled
    response = alice.client.post(f"/api/v1/tasks/{task.pk}/cancel/")
    # Then it is cancelled
    assert response.status_code == 200, response.json()
    assert response.json()["status"] == "cancelled"
    assert TaskEntity.objects.get(pk=task.pk).status == TaskStatus.CANCELLED


@pytest.mark.parametrize("status", ["success", "dead", "cancelled"])
def test_cancel_a_finished_task_answers_409(alice: Member, status: str) -> None:
    task = TaskFactory(lambda_ref=alice.lam, status=status)
    response = alice.client.post(f"/api/v1/tasks/{task.pk}/cancel/")
    assert response.status_code == 409
    assert "detail" in response.json()
    assert TaskEntity.objects.get(pk=task.pk).status == status


def test_cancel_a_running_task_answers_202_while_its_worker_is_asked_to_stop_it(
        alice: Member) -> None:
    # Given a running task
    task = TaskFactory(lambda_ref=alice.lam, status="processing")
    # When it is cancelled, Then the answer is 202: it still runs, its worker is being asked
    response = alice.client.post(f"/api/v1/tasks/{task.pk}/cancel/")
    assert response.status_code == 202, response.json()
    body = response.json()
    assert body["status"] == "processing" and body["cancel_requested_at"]
    # ...and asking again answers the same
    assert alice.client.post(f"/api/v1/tasks/{task.pk}/cancel/").status_code == 202


def test_every_bad_field_is_told_at_once(alice: Member) -> None:
    # When a task has a bad time, an unknown lambda and an unknown priority
    response = alice.client.post("/api/v1/tasks/", {
        "lambda": "no.such", "priority": "urgent", "run_at": "tomorrow"}, format="json")
    # Then one answer names all three
    assert response.status_code == 400
    assert set(response.json()) == {"lambda", "priority", "run_at"}


def test_a_batch_item_with_a_malformed_field_tells_all_its_errors(alice: Member) -> None:
    # When one item of a batch has a malformed delay and an unknown priority
    tasks = [{"lambda": alice.lam.name}, {"lambda": alice.lam.name, "delay": -1,
                                          "priority": "urgent"}]
    response = alice.client.post("/api/v1/tasks/batch/", {"tasks": tasks}, format="json")
    # Then both are named for that item
    assert response.status_code == 400
    assert set(response.json()) == {"tasks[1].delay", "tasks[1].priority"}


def test_a_task_scheduled_after_others_shows_its_chain(alice: Member) -> None:
    # Given a parent task
    parent = schedule(alice).json()
    # When a child is scheduled after it
    response = schedule(alice, after=[parent["id"]])
    # Then the child waits for it, and both show the link
    assert response.status_code == 201, response.json()
    child = response.json()
    assert (child["status"], child["parents"], child["children"]) == ("waiting", [parent["id"]], [])
    shown = alice.client.get(f"/api/v1/tasks/{parent['id']}/").json()
    assert shown["children"] == [child["id"]]


def test_a_parent_the_caller_cannot_see_answers_400(alice: Member) -> None:
    # Given a task of another team
    bob = member("beta")
    theirs = schedule(bob).json()
    # When alice schedules after it (or after a task that does not exist)
    for parents in ([theirs["id"]], [10**12]):
        response = schedule(alice, after=parents)
        # Then she is told the parent is unknown, the same either way, and nothing is created
        assert response.status_code == 400
        assert response.json()["after"] == [f"Unknown parent task(s): {parents[0]}."]
    assert TaskEntity.objects.filter(lambda_ref=alice.lam).count() == 0


def test_list_by_worker_shows_what_it_runs_and_ran_within_the_team(alice: Member) -> None:
    # Given a worker on host-a that runs one task and ran another, and tasks run elsewhere
    now = timezone.now()
    worker = "host-a:41:abc123"
    Worker.objects.create(worker_id=worker, host="host-a", pid=41, lambdas=[], threads=1,
                          started_at=now, last_seen=now)
    running = TaskFactory(lambda_ref=alice.lam, status=TaskStatus.PROCESSING, worker=worker)
    ran = TaskFactory(lambda_ref=alice.lam, status=TaskStatus.SUCCESS, worker="host-b:7:def")
    TaskAttempt.objects.create(task=ran, number=1, worker=worker, started_at=now, ended_at=now,
                               outcome="retry")
    TaskAttempt.objects.create(task=ran, number=2, worker="host-b:7:def", started_at=now,
                               ended_at=now, outcome="success")
    TaskFactory(lambda_ref=alice.lam, status=TaskStatus.SUCCESS, worker="host-b:7:def")
    theirs = TaskFactory(lambda_ref=member("beta").lam, status=TaskStatus.PROCESSING,
                         worker=worker)
    # When the team lists the worker's tasks
    response = alice.client.get("/api/v1/tasks/", {"worker": worker})
    # Then it sees the one it runs and the one it ran, newest first, and none of another team
    assert response.status_code == 200, response.json()
    assert [task["id"] for task in response.json()["results"]] == [ran.pk, running.pk]
    assert theirs.pk not in [task["id"] for task in response.json()["results"]]
    # ...and each attempt names its worker's host
    history = alice.client.get(f"/api/v1/tasks/{ran.pk}/").json()["attempt_history"]
    assert [(a["number"], a["host"]) for a in history] == [(1, "host-a"), (2, "")]


def test_the_worker_filter_reads_three_indexes_not_the_task_table() -> None:
    """What a worker runs, ran to success and ran otherwise are three probes by index
    (task_held, task_succeeded_by, attempt_worker); OR'd into one condition, PostgreSQL could
    use none of them and read every task (sequential scans off: whatever index it can use)."""
    with connection.cursor() as cursor:
        cursor.execute("SET enable_seqscan = off")
        try:
            plan = TaskEntity.objects.filter(operations.worked_by("host-a:41:abc123")).explain()
        finally:
            cursor.execute("RESET enable_seqscan")
    for index in ("task_held", "task_succeeded_by", "attempt_worker"):
        assert index in plan, plan
