"""POST /tasks/{id}/requeue/ and /run-now/, and the attempt history of GET /tasks/{id}/."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from tasks_core.conf import atf_settings
from tasks_core.models import TaskAttempt, TaskEntity
from tasks_core.states import TaskStatus
from tests.factories import TaskFactory
from tests.integration.tasks_api.test_api_support import Member, member, schedule
from tests.store_steps import fail_then_succeed

pytestmark = pytest.mark.django_db

FINISHED_WITHOUT_SUCCESS = ["fatal_failure", "dead", "cancelled", "dropped"]
NOT_REQUEUEABLE = ["new", "waiting", "enqueued", "claimed", "processing", "retrying", "success"]


@pytest.fixture
def alice() -> Member:
    return member("alpha")


def post(who: Member, task: TaskEntity, action: str) -> tuple[int, dict]:
    response = who.client.post(f"/api/v1/tasks/{task.pk}/{action}/")
    return response.status_code, response.json()


@pytest.mark.parametrize("status", FINISHED_WITHOUT_SUCCESS)
def test_requeue_puts_a_task_that_ended_without_success_back_to_new(alice: Member,
                                                                     status: str) -> None:
    # Given a task of the team that ended without success after two attempts
    task = TaskFactory(lambda_ref=alice.lam, status=status, attempts=2,
                       finished_at=timezone.now(), last_error={"type": "E", "message": "m"})
    # When the team requeues it
    code, body = post(alice, task, "requeue")
    # Then it is new again, due now, with its attempts reset
    assert code == 200, body
    assert (body["id"], body["status"], body["attempts"]) == (task.pk, "new", 0)
    assert body["finished_at"] is None and body["last_error"] is None
    assert TaskEntity.objects.get(pk=task.pk).assoc.status == "new"


@pytest.mark.parametrize("status", NOT_REQUEUEABLE)
def test_requeue_of_any_other_status_answers_409(alice: Member, status: str) -> None:
    task = TaskFactory(lambda_ref=alice.lam, status=status)
    code, body = post(alice, task, "requeue")
    assert code == 409
    assert f"status {status} cannot be requeued" in body["detail"]
    assert TaskEntity.objects.get(pk=task.pk).status == status


def test_run_now_makes_a_delayed_task_due_now(alice: Member) -> None:
    # Given a task due in an hour
    task = TaskFactory(lambda_ref=alice.lam, run_at=timezone.now() + timedelta(hours=1))
    # When the team runs it now
    before = timezone.now()
    code, body = post(alice, task, "run-now")
    # Then it is due now, and the consumer's trigger fires now
    assert code == 200, body
    task.refresh_from_db()
    assert task.status == "new" and before <= task.run_at <= timezone.now()
    assert task.assoc.next_trigger_at <= timezone.now()


def test_run_now_makes_a_retrying_task_due_now(alice: Member) -> None:
    task = TaskFactory(lambda_ref=alice.lam, status=TaskStatus.RETRYING, attempts=1)
    task.assoc.next_trigger_at = timezone.now() + timedelta(hours=1)
    task.assoc.save(update_fields=["next_trigger_at"])
    code, body = post(alice, task, "run-now")
    assert code == 200, body
    assert body["status"] == "retrying"
    assert TaskEntity.objects.get(pk=task.pk).assoc.next_trigger_at <= timezone.now()


@pytest.mark.parametrize("status", ["new", "waiting", "enqueued", "claimed", "processing",
                                    "success", *FINISHED_WITHOUT_SUCCESS])
def test_run_now_of_a_task_that_is_not_delayed_answers_409(alice: Member, status: str) -> None:
    # Given a task that is not waiting for a later time (a `new` one is due already)
    task = TaskFactory(lambda_ref=alice.lam, status=status)
    run_at = task.run_at
    code, body = post(alice, task, "run-now")
    assert code == 409
    assert "cannot be run now" in body["detail"]
    assert TaskEntity.objects.get(pk=task.pk).run_at == run_at


@pytest.mark.parametrize("action", ["requeue", "run-now", "cancel"])
def test_another_teams_task_is_not_found_and_unchanged(alice: Member, action: str) -> None:
    # Given a dead task and a delayed task of team A, and a member of team B
    bob = member("beta")
    later = timezone.now() + timedelta(hours=1)
    tasks = [TaskFactory(lambda_ref=alice.lam, status=TaskStatus.DEAD),
             TaskFactory(lambda_ref=alice.lam, run_at=later)]
    # When team B acts on them, and on an id that does not exist
    answers = [post(bob, task, action) for task in tasks]
    missing_id = tasks[-1].pk + 1000
    missing = bob.client.post(f"/api/v1/tasks/{missing_id}/{action}/")
    # Then every answer is the 404 of a task that does not exist, and nothing changed
    assert [code for code, _body in answers] == [404, 404]
    assert [body for _code, body in answers] == [{"detail": f"no task {t.pk}"} for t in tasks]
    assert (missing.status_code, missing.json()) == (404, {"detail": f"no task {missing_id}"})
    assert [TaskEntity.objects.get(pk=t.pk).status for t in tasks] == ["dead", "new"]
    assert TaskEntity.objects.get(pk=tasks[1].pk).run_at == later


def test_the_detail_shows_the_attempt_history_oldest_first(alice: Member) -> None:
    # Given a task that failed once and then succeeded, with a row for each attempt (as the
    # store wrote them before a success's row was left out: it is shown once)
    task = TaskFactory(lambda_ref=alice.lam, status=TaskStatus.SUCCESS, attempts=2)
    start = timezone.now()
    error = {"type": "ValueError", "message": "boom", "traceback": "..."}
    TaskAttempt.objects.create(task=task, number=2, worker="w2", started_at=start,
                               ended_at=start + timedelta(seconds=2), outcome="success")
    TaskAttempt.objects.create(task=task, number=1, worker="w1", started_at=start,
                               ended_at=start + timedelta(seconds=1), outcome="retry",
                               error=error)
    # When the team reads it
    body = alice.client.get(f"/api/v1/tasks/{task.pk}/").json()
    # Then `attempts` stays the count, and `attempt_history` lists each attempt
    assert body["attempts"] == 2
    history = body["attempt_history"]
    assert [(a["number"], a["worker"], a["outcome"], a["error"]) for a in history] == [
        (1, "w1", "retry", error), (2, "w2", "success", None)]
    assert set(history[0]) == {"number", "worker", "host", "started_at", "ended_at", "outcome",
                               "error"}


def test_a_success_that_left_no_attempt_row_is_its_last_attempt_everywhere(
        alice: Member) -> None:
    # Given a task that failed on one worker and succeeded on another, through the store
    # (whose success writes no attempt row: the task's row holds it)
    task = TaskEntity.objects.get(pk=schedule(alice).json()["id"])
    fail_then_succeed(task, ["host-a:1:a", "host-b:2:b"])
    assert list(TaskAttempt.objects.filter(task=task).values_list("outcome", flat=True)) == [
        "retry"]
    # When the team reads it, pages through its attempts one at a time, and lists the tasks
    # of the worker that succeeded
    body = alice.client.get(f"/api/v1/tasks/{task.pk}/").json()
    pages, url = [], f"/api/v1/tasks/{task.pk}/attempts/?page_size=1"
    while url:
        page = alice.client.get(url).json()
        pages.append([(a["number"], a["outcome"]) for a in page["results"]])
        url, back = page["next"], page["previous"]
    back_page = alice.client.get(back).json()
    listed = alice.client.get("/api/v1/tasks/", {"worker": "host-b:2:b"}).json()["results"]
    # Then the success is its second attempt in each, on the worker that ran it
    assert [(a["number"], a["worker"], a["outcome"]) for a in body["attempt_history"]] == [
        (1, "host-a:1:a", "retry"), (2, "host-b:2:b", "success")]
    assert body["attempt_history"][1]["ended_at"] == body["finished_at"]
    assert (body["attempt_history_count"], body["result"]) == (2, {"n": 2})
    assert pages == [[(1, "retry")], [(2, "success")]]  # a page at a time, never more
    assert [a["number"] for a in back_page["results"]] == [1]  # and back from the last
    one_page = alice.client.get(f"/api/v1/tasks/{task.pk}/attempts/?page_size=2").json()
    assert ([a["number"] for a in one_page["results"]], one_page["next"]) == ([1, 2], None)
    assert [listed_task["id"] for listed_task in listed] == [task.pk]


def test_lists_do_not_carry_the_attempt_history(alice: Member) -> None:
    TaskFactory(lambda_ref=alice.lam)
    listed = alice.client.get("/api/v1/tasks/").json()["results"]
    assert "attempt_history" not in listed[0] and listed[0]["attempts"] == 0


def test_the_schema_has_the_actions_and_the_history(alice: Member) -> None:
    schema = alice.client.get("/api/schema/?format=json").json()
    assert "post" in schema["paths"]["/api/v1/tasks/{id}/requeue/"]
    assert "post" in schema["paths"]["/api/v1/tasks/{id}/run-now/"]
    detail = schema["paths"]["/api/v1/tasks/{id}/"]["get"]["responses"]["200"]
    ref = detail["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
    assert "attempt_history" in schema["components"]["schemas"][ref]["properties"]


def test_the_schema_states_the_idempotency_key_limit_that_is_enforced(alice: Member,
                                                                      settings: Any) -> None:
    # Given the schema's limit on an idempotency key
    schema = alice.client.get("/api/schema/?format=json").json()
    key = schema["components"]["schemas"]["ScheduleTaskRequest"]["properties"]["idempotency_key"]
    limit = key["maxLength"]
    # Then it is the setting, and a key that long is accepted while one longer is refused
    assert limit == atf_settings.max_idempotency_key_length
    assert alice.client.post("/api/v1/tasks/", {"lambda": alice.lam.name,
                             "idempotency_key": "k" * limit}, format="json").status_code == 201
    too_long = alice.client.post("/api/v1/tasks/", {"lambda": alice.lam.name,
                                 "idempotency_key": "k" * (limit + 1)}, format="json")
    assert too_long.status_code == 400 and "idempotency_key" in too_long.json()
