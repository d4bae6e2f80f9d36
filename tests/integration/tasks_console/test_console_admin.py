"""The console's admin pages and actions, through Django's test client, checked in the database."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from tasks_core import atf, limits
from tasks_core.models import Collection, TaskAssoc, TaskAttempt, TaskEntity, Worker
from tasks_core.states import TaskStatus
from tests.factories import LambdaFactory, TaskFactory
from tests.store_steps import fail_then_succeed

pytestmark = pytest.mark.django_db

TASKS = reverse("admin:tasks_core_taskentity_changelist")
LAMBDAS = reverse("admin:tasks_core_lambda_changelist")
COLLECTIONS = reverse("admin:tasks_core_collection_changelist")
DEAD = reverse("admin:tasks_console_deadletter_changelist")


def act(client: Client, url: str, action: str, ids: list[int], **extra: str) -> object:
    """Post an admin action for `ids`, as the changelist's form does."""
    data = {"action": action, "index": "0", "_selected_action": [str(pk) for pk in ids], **extra}
    return client.post(url, data)


def error(message: str) -> dict[str, str]:
    return {"type": "ValueError", "message": message,
            "traceback": f"Traceback (most recent call last):\nValueError: {message}\n"}


def messages_of(page: object) -> str:
    return "\n".join(str(m) for m in page.context["messages"])  # type: ignore[attr-defined]


def status_of(task: TaskEntity) -> str:
    return TaskEntity.objects.values_list("status", flat=True).get(pk=task.pk)


# --- gates ----------------------------------------------------------------------------------


def test_pause_shows_a_form_then_pauses_until_the_given_time(admin_client: Client) -> None:
    # Given a lambda with a due task
    lam = LambdaFactory(name="billing.send")
    TaskFactory(lambda_ref=lam)
    # When the pause action is chosen, a page asks for an optional "until"
    page = act(admin_client, LAMBDAS, "pause_gate", [lam.pk])
    assert page.status_code == 200
    assert "1 tasks are due now" in page.content.decode()
    # And when it is confirmed with a time
    until = (timezone.now() + timedelta(hours=2)).replace(second=0, microsecond=0)
    done = act(admin_client, LAMBDAS, "pause_gate", [lam.pk], apply="1",
               until=until.strftime("%Y-%m-%dT%H:%M"))
    # Then the gate is paused until then
    assert done.status_code == 302
    lam.refresh_from_db()
    assert (lam.gate, lam.gate_until) == ("paused", until)


def test_pause_refuses_a_time_in_the_past(admin_client: Client) -> None:
    # Given an open lambda
    lam = LambdaFactory()
    # When it is paused "until" a past time
    page = act(admin_client, LAMBDAS, "pause_gate", [lam.pk], apply="1",
               until="2001-01-01T00:00")
    # Then the form says so and the gate stays open
    assert "Pick a time in the future" in page.content.decode()
    lam.refresh_from_db()
    assert lam.gate == "open"


def test_resume_opens_the_gate(admin_client: Client) -> None:
    # Given a paused lambda
    lam = LambdaFactory(gate="paused", gate_until=timezone.now() + timedelta(hours=1))
    # When it is resumed
    act(admin_client, LAMBDAS, "resume_gate", [lam.pk])
    # Then its gate is open, with no until
    lam.refresh_from_db()
    assert (lam.gate, lam.gate_until) == ("open", None)


def test_drop_asks_for_confirmation_with_the_count(admin_client: Client) -> None:
    # Given a lambda with two due tasks and one scheduled for later
    lam = LambdaFactory(name="mail.blast")
    TaskFactory.create_batch(2, lambda_ref=lam)
    TaskFactory(lambda_ref=lam, run_at=timezone.now() + timedelta(days=1))
    # When drop is chosen
    page = act(admin_client, LAMBDAS, "drop_gate", [lam.pk])
    # Then a confirmation page states how many tasks will be dropped, and nothing changed yet
    text = page.content.decode()
    assert "Drop: are you sure?" in text
    assert "2 tasks are due now and will be dropped at once; 3 unfinished tasks" in text
    lam.refresh_from_db()
    assert lam.gate == "open"
    # When it is confirmed
    act(admin_client, LAMBDAS, "drop_gate", [lam.pk], apply="1", until="")
    # Then the gate is dropped
    lam.refresh_from_db()
    assert (lam.gate, lam.gate_until) == ("dropped", None)


def test_collection_gate_is_set_on_the_collection_only(admin_client: Client) -> None:
    # Given a lambda with a "marketing" collection
    lam = LambdaFactory(name="mail.send")
    TaskFactory(lambda_ref=lam, collection="marketing")
    collection = Collection.objects.create(lambda_ref=lam, name="marketing")
    # When the collection is paused
    act(admin_client, COLLECTIONS, "pause_gate", [collection.pk], apply="1", until="")
    # Then the collection is paused and its lambda is still open
    collection.refresh_from_db()
    lam.refresh_from_db()
    assert (collection.gate, lam.gate) == ("paused", "open")
    # And the collection list shows the gate and the task it holds back
    text = admin_client.get(COLLECTIONS).content.decode()
    assert "paused" in text and '<td class="field-held_back">1</td>' in text


def test_lambda_page_shows_gate_buttons_and_held_back_tasks(admin_client: Client) -> None:
    # Given a paused lambda with three due tasks
    lam = LambdaFactory(name="reports.build", gate="paused")
    TaskFactory.create_batch(3, lambda_ref=lam)
    # When its page is opened
    page = admin_client.get(reverse("admin:tasks_core_lambda_change", args=[lam.pk]))
    # Then it shows its gate, the tasks held back and the gate buttons
    text = page.content.decode()
    assert page.status_code == 200
    assert 'data-action="pause_gate"' in text and 'data-action="drop_gate"' in text
    assert "paused" in text and '<div class="readonly">3</div>' in text


# --- task actions ---------------------------------------------------------------------------


def test_cancel_reports_per_task_why_some_were_not_cancelled(admin_client: Client) -> None:
    # Given a new task, a running one and a finished one
    waiting = TaskFactory()
    running = TaskFactory(status=TaskStatus.PROCESSING)
    finished = TaskFactory(status=TaskStatus.SUCCESS)
    # When all three are cancelled
    page = act(admin_client, TASKS, "cancel_tasks", [waiting.pk, running.pk, finished.pk])
    # Then the new one is cancelled, the running one's worker is asked to stop it, the
    # finished one is left alone, and the page says so
    assert status_of(waiting) == TaskStatus.CANCELLED
    assert status_of(running) == TaskStatus.PROCESSING
    assert TaskEntity.objects.get(pk=running.pk).cancel_requested_at is not None
    text = messages_of(admin_client.get(page.url))
    assert "Cancelled 2 task(s)." in text
    assert f"Task #{running.pk} is running: its worker is asked to stop it." in text
    assert f"Task #{finished.pk} not cancelled: a task in status success cannot be" in text


def test_run_now_moves_the_trigger_to_now(admin_client: Client) -> None:
    # Given a task scheduled for tomorrow
    task = TaskFactory(run_at=timezone.now() + timedelta(days=1))
    before = timezone.now()
    # When "run now" is chosen
    act(admin_client, TASKS, "run_now", [task.pk])
    # Then it is due now
    task.refresh_from_db()
    assert before <= task.run_at <= timezone.now()
    assert TaskAssoc.objects.get(task_id=task.pk).next_trigger_at <= timezone.now()


def test_requeue_puts_finished_failures_back_to_new(admin_client: Client) -> None:
    # Given a dead task, a fatal failure and a success
    dead = TaskFactory(status=TaskStatus.DEAD, attempts=3, last_error=error("boom"))
    fatal = TaskFactory(status=TaskStatus.FATAL_FAILURE, attempts=1)
    done = TaskFactory(status=TaskStatus.SUCCESS, attempts=1)
    # When all three are requeued
    page = act(admin_client, TASKS, "requeue_tasks", [dead.pk, fatal.pk, done.pk])
    # Then the failures are new again with their attempts reset; the success is untouched
    assert [status_of(t) for t in (dead, fatal, done)] == ["new", "new", "success"]
    assert TaskEntity.objects.get(pk=dead.pk).attempts == 0
    text = messages_of(admin_client.get(page.url))
    assert "Requeued 2 task(s)" in text and "1 task(s) were not in a requeueable status" in text


def test_task_page_buttons_post_the_action_for_that_task(admin_client: Client) -> None:
    # Given a new task, whose page has a Cancel button
    task = TaskFactory()
    page = admin_client.get(reverse("admin:tasks_core_taskentity_change", args=[task.pk]))
    assert 'data-action="cancel_tasks"' in page.content.decode()
    # When the button's form is posted
    act(admin_client, TASKS, "cancel_tasks", [task.pk], select_across="0")
    # Then the task is cancelled
    assert status_of(task) == TaskStatus.CANCELLED


# --- task pages -----------------------------------------------------------------------------


def test_task_page_shows_payload_error_timeline_and_chain(admin_client: Client,
                                                          now: datetime) -> None:
    # Given a dead task with two attempts, a payload, a traceback and a child in its chain
    task = TaskFactory(status=TaskStatus.DEAD, attempts=2, payload={"order": 4711},
                       last_error=error("card declined"))
    child = TaskFactory(lambda_ref=task.lambda_ref)
    child.parents.add(task)
    for number, outcome in ((1, "retry"), (2, "dead")):
        TaskAttempt.objects.create(task=task, number=number, worker="host-1:42",
                                   started_at=now, ended_at=now, outcome=outcome,
                                   error=error(f"card declined #{number}"))
    # When its page is opened
    page = admin_client.get(reverse("admin:tasks_core_taskentity_change", args=[task.pk]))
    # Then it shows all of it, read-only
    text = page.content.decode()
    assert page.status_code == 200
    assert "&quot;order&quot;: 4711" in text
    assert "ValueError: card declined" in text and "Traceback (most recent call last)" in text
    assert "Attempt 1</strong> — retry" in text and "Attempt 2</strong> — dead" in text
    assert f"#{child.pk}</a>" in text
    assert 'name="_save"' not in text


def test_task_page_shows_a_success_that_left_no_attempt_row_as_its_last_attempt(
        admin_client: Client) -> None:
    # Given a task that failed on one worker and succeeded on another, through the store
    task = atf.schedule("demo.noop")
    fail_then_succeed(task, ["host-a:1:a", "host-b:2:b"])
    # When its page is opened
    page = admin_client.get(reverse("admin:tasks_core_taskentity_change", args=[task.pk]))
    # Then its timeline ends with the success, on the worker that ran it
    text = page.content.decode()
    assert page.status_code == 200
    assert re.findall(r"Attempt (\d+)</strong> — (\w+)", text) == [("1", "retry"),
                                                                    ("2", "success")]
    assert "on host-b:2:b" in text


def test_task_page_shows_the_latest_attempts_and_links_to_all(admin_client: Client,
                                                             now: datetime) -> None:
    # Given a task with more attempts than its page shows
    task = TaskFactory(status=TaskStatus.DEAD)
    total = limits.SHOWN_ATTEMPTS + 3
    TaskAttempt.objects.bulk_create(
        TaskAttempt(task=task, number=n, worker="w", started_at=now, ended_at=now,
                    outcome="retry") for n in range(1, total + 1))
    # When its page is opened
    text = admin_client.get(reverse("admin:tasks_core_taskentity_change",
                                    args=[task.pk])).content.decode()
    # Then it shows the latest ones, oldest first, and links to all of them
    shown = [int(n) for n in re.findall(r"Attempt (\d+)</strong>", text)]
    assert shown == list(range(4, total + 1))
    assert f"The latest {limits.SHOWN_ATTEMPTS} of {total} attempts" in text
    everything = admin_client.get(reverse("admin:tasks_core_taskattempt_changelist"),
                                  {"q": str(task.pk)})
    assert len(everything.context["cl"].result_list) == total


@pytest.mark.parametrize("term", ["id", "key", "error"])
def test_search_finds_by_id_idempotency_key_or_error_text(admin_client: Client,
                                                          term: str) -> None:
    # Given a task with a key and an error among others
    wanted = TaskFactory(idempotency_key="order-99", status=TaskStatus.DEAD,
                         last_error=error("smtp timeout"))
    other = TaskFactory()
    query = {"id": str(wanted.pk), "key": "order-99", "error": "SMTP time"}[term]
    # When the list is searched
    page = admin_client.get(TASKS, {"q": query})
    # Then it finds that task only
    ids = [row.pk for row in page.context["cl"].result_list]
    assert ids == [wanted.pk] and other.pk not in ids


@pytest.mark.parametrize("field", ["lambda", "collection", "status", "priority", "team", "date"])
def test_filters_keep_only_matching_tasks(admin_client: Client, field: str) -> None:
    # Given two tasks that differ in every filtered field
    wanted = TaskFactory(collection="vip", priority="high", status=TaskStatus.RETRYING)
    other = TaskFactory(collection="default", priority="low")
    TaskEntity.objects.filter(pk=other.pk).update(created_at=timezone.now() - timedelta(days=30))
    today = timezone.now().date()
    params = {
        "lambda": {"lambda": wanted.lambda_ref_id},
        "collection": {"collection": "vip"},
        "status": {"status__exact": "retrying"},
        "priority": {"priority": "high"},
        "team": {"team": wanted.lambda_ref.team_id},
        "date": {"created_at__gte": str(today),
                 "created_at__lt": str(today + timedelta(days=1))},
    }[field]
    # When the list is filtered
    page = admin_client.get(TASKS, params)
    # Then only the matching task is listed
    assert [row.pk for row in page.context["cl"].result_list] == [wanted.pk]


def test_every_model_page_opens(admin_client: Client) -> None:
    # Given some data in every table
    task = TaskFactory(status=TaskStatus.DEAD, last_error=error("x"))
    names = ["team", "lambda", "collection", "taskentity", "taskattempt", "taskdependency",
             "periodictask", "worker"]
    urls = [reverse(f"admin:tasks_core_{name}_changelist") for name in names] + [DEAD]
    # When each list opens
    codes = [admin_client.get(url).status_code for url in urls]
    # Then all are fine, and so is a dead letter's page
    assert codes == [200] * len(urls)
    dead_page = reverse("admin:tasks_console_deadletter_change", args=[task.pk])
    assert admin_client.get(dead_page).status_code == 200


# --- the dead-letter queue -------------------------------------------------------------------


def test_dead_letter_page_lists_dead_tasks_grouped_by_lambda_and_error(
        admin_client: Client) -> None:
    # Given dead tasks of two kinds and a task that is not dead
    lam = LambdaFactory(name="pay.charge")
    TaskFactory.create_batch(3, lambda_ref=lam, status=TaskStatus.DEAD,
                             last_error=error("card declined"))
    TaskFactory(lambda_ref=lam, status=TaskStatus.DEAD, last_error=error("gateway down"))
    alive = TaskFactory(lambda_ref=lam)
    # When the dead-letter page opens
    page = admin_client.get(DEAD)
    # Then it lists the four dead tasks and groups them by error
    ids = {row.pk for row in page.context["cl"].result_list}
    assert len(ids) == 4 and alive.pk not in ids
    groups = {(g["lambda_ref__name"], g["error_type"], g["message"], g["count"])
              for g in page.context["dead_groups"]}
    assert groups == {("pay.charge", "ValueError", "card declined", 3),
                      ("pay.charge", "ValueError", "gateway down", 1)}


def test_requeue_everything_matching_the_filter(admin_client: Client) -> None:
    # Given dead tasks of two lambdas
    first, second = LambdaFactory(), LambdaFactory()
    mine = TaskFactory.create_batch(3, lambda_ref=first, status=TaskStatus.DEAD,
                                    last_error=error("bug"))
    theirs = TaskFactory(lambda_ref=second, status=TaskStatus.DEAD, last_error=error("bug"))
    # When "requeue all matching" is posted on the list filtered to the first lambda
    act(admin_client, f"{DEAD}?lambda={first.pk}", "requeue_dead", [mine[0].pk],
        select_across="1")
    # Then all its dead tasks are new again, and the other lambda's are still dead
    assert [status_of(t) for t in mine] == ["new"] * 3
    assert status_of(theirs) == TaskStatus.DEAD


def test_discard_confirms_then_deletes(admin_client: Client) -> None:
    # Given two dead tasks
    tasks = TaskFactory.create_batch(2, status=TaskStatus.DEAD, last_error=error("x"))
    ids = [t.pk for t in tasks]
    # When discard is chosen, a confirmation page states the count and nothing is deleted
    page = act(admin_client, DEAD, "discard_dead", ids)
    assert "2 dead task(s) will be deleted for good" in page.content.decode()
    assert TaskEntity.objects.filter(pk__in=ids).count() == 2
    # When it is confirmed
    act(admin_client, DEAD, "discard_dead", ids, apply="1")
    # Then they are gone
    assert TaskEntity.objects.filter(pk__in=ids).count() == 0


def test_dead_letter_actions_leave_tasks_that_are_not_dead(admin_client: Client) -> None:
    # Given a lambda with a success (not in the dead-letter queue)
    done = TaskFactory(status=TaskStatus.SUCCESS)
    # When its id is posted to the dead-letter requeue action
    act(admin_client, DEAD, "requeue_dead", [done.pk])
    # Then it is untouched
    assert status_of(done) == TaskStatus.SUCCESS


def test_a_group_link_lists_that_group_only(admin_client: Client) -> None:
    # Given dead tasks with two different errors
    lam = LambdaFactory()
    declined = TaskFactory.create_batch(2, lambda_ref=lam, status=TaskStatus.DEAD,
                                        last_error=error("card declined"))
    TaskFactory(lambda_ref=lam, status=TaskStatus.DEAD, last_error=error("gateway down"))
    # When the summary's link of the "card declined" group is followed
    page = admin_client.get(DEAD, {"lambda": lam.pk, "error_type": "ValueError",
                                   "error_message": "card declined"})
    # Then only that group is listed
    assert {row.pk for row in page.context["cl"].result_list} == {t.pk for t in declined}


def test_where_work_runs_the_task_list_and_a_workers_page(admin_client: Client) -> None:
    # Given a live worker running one task for 90 s that ran another, and a task run elsewhere
    now = timezone.now()
    worker = Worker.objects.create(worker_id="host-a:41:abc123", host="host-a", pid=41,
                                   lambdas=[], threads=2, started_at=now, last_seen=now)
    running = TaskFactory(status=TaskStatus.PROCESSING, worker=worker.worker_id,
                          started_at=now - timedelta(seconds=90))
    ran = TaskFactory(status=TaskStatus.SUCCESS, worker=worker.worker_id)
    TaskAttempt.objects.create(task=ran, number=1, worker=worker.worker_id, started_at=now,
                               ended_at=now, outcome="success")
    elsewhere = TaskFactory(status=TaskStatus.SUCCESS, worker="host-b:7:def")
    # When the task list is filtered by the worker
    page = admin_client.get(TASKS, {"worker": worker.worker_id})
    # Then it lists the tasks it runs and ran, with a worker column, and the filter offers it
    assert page.status_code == 200
    shown = {row.pk for row in page.context["cl"].result_list}
    assert shown == {running.pk, ran.pk} and elsewhere.pk not in shown
    assert 'class="column-worker"' in page.content.decode()
    # ...and the worker's page lists its running task and how long it has run
    text = admin_client.get(reverse("admin:tasks_core_worker_change",
                                    args=[worker.pk])).content.decode()
    assert f">{running.pk}</a>" in text and "1m 3" in text  # 90 s ago, and the render
    assert f">{ran.pk}</a>" not in text
