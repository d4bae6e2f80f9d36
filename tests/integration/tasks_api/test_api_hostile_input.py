"""Issue 37's hostile input: times out of range, NUL and lone surrogates, an attempt history
without bound, and another team's lambda names confirmed by their answer."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from tasks_api.serializers import SHOWN_ATTEMPTS
from tasks_console.forms import GateForm
from tasks_core import atf, json_fields, limits, scheduling
from tasks_core.exceptions import InvalidShape, InvalidTask
from tasks_core.models import PeriodicTask, TaskAttempt, TaskEntity
from tasks_core.queues import QueueBackend
from tests.factories import TaskFactory
from tests.integration.tasks_api.test_api_support import BAD_TIMES, Member, schedule
from tests.integration.tasks_api.test_api_worker import post, worker_member

pytestmark = pytest.mark.django_db

OUT_OF_RANGE = BAD_TIMES


def raw_post(who: Member, path: str, text: str) -> Any:
    """POST JSON text as written: escapes such as "\\ud800" reach the server unchanged."""
    return who.client.post(path, text, content_type="application/json")


# --- times out of range ---------------------------------------------------------------------


@pytest.mark.parametrize("run_at", OUT_OF_RANGE)
def test_a_run_at_out_of_range_is_a_field_error_and_nothing_is_stored(alice: Member,
                                                                     run_at: str) -> None:
    single = schedule(alice, run_at=run_at)
    batch = alice.client.post("/api/v1/tasks/batch/", {"tasks": [
        {"lambda": alice.lam.name}, {"lambda": alice.lam.name, "run_at": run_at}]},
        format="json")
    assert (single.status_code, single.json()) == (400, {"run_at": [limits.TIME_OUT_OF_RANGE]})
    assert (batch.status_code, batch.json()) == (
        400, {"tasks[1].run_at": [limits.TIME_OUT_OF_RANGE]})
    assert not TaskEntity.objects.exists()
    assert alice.client.get("/api/v1/tasks/").status_code == 200


def test_a_run_at_in_range_is_stored_in_utc(alice: Member) -> None:
    answer = schedule(alice, run_at="9998-12-31T09:59:59-14:00")
    assert answer.status_code == 201, answer.json()
    assert answer.json()["run_at"] == "9998-12-31T23:59:59Z"
    assert TaskEntity.objects.get().run_at.utcoffset() == timedelta(0)


def test_python_callers_get_the_same_bound_on_run_at_and_on_where_a_delay_leads(
        alice: Member) -> None:
    late = datetime(9999, 6, 1, tzinfo=UTC)
    with pytest.raises(InvalidTask) as single:
        atf.schedule(alice.lam.name, run_at=late)
    with pytest.raises(InvalidTask) as many:
        scheduling.schedule_many([{"lambda": alice.lam.name, "run_at": OUT_OF_RANGE[0]}])
    with pytest.raises(InvalidTask) as delayed:
        scheduling.schedule(scheduling.TaskRequest(alice.lam.name, delay=86400),
                            now=datetime(9998, 12, 31, 12, tzinfo=UTC))
    assert single.value.errors == {"run_at": [limits.TIME_OUT_OF_RANGE]}
    assert many.value.errors == {"tasks[0].run_at": [limits.TIME_OUT_OF_RANGE]}
    assert delayed.value.errors == {"delay": [limits.TIME_OUT_OF_RANGE]}
    assert not TaskEntity.objects.exists()


@pytest.mark.parametrize("until", OUT_OF_RANGE[:2])
def test_a_gate_until_and_a_token_expiry_out_of_range_are_field_errors(alice: Member,
                                                                       until: str) -> None:
    gate = alice.client.post(f"/api/v1/lambdas/{alice.lam.name}/gate/",
                             {"state": "paused", "until": until}, format="json")
    token = alice.client.post("/api/v1/tokens/", {"name": "t", "expires_at": until},
                              format="json")
    assert (gate.status_code, gate.json()) == (400, {"until": [limits.TIME_OUT_OF_RANGE]})
    assert (token.status_code, token.json()) == (400, {"expires_at": [limits.TIME_OUT_OF_RANGE]})
    alice.lam.refresh_from_db()
    assert (alice.lam.gate, alice.lam.gate_until) == ("open", None)
    with pytest.raises(InvalidTask) as python:
        scheduling.set_gate(alice.lam.name, "paused", until=datetime(9999, 6, 1, tzinfo=UTC))
    assert python.value.errors == {"until": [limits.TIME_OUT_OF_RANGE]}


def test_the_consoles_gate_form_keeps_the_bounds() -> None:
    form = GateForm({"until": "9999-06-01 00:00"})
    assert not form.is_valid()
    assert form.errors["until"] == [limits.TIME_OUT_OF_RANGE]


@pytest.mark.parametrize("started_at", OUT_OF_RANGE[:2])
def test_a_workers_started_at_out_of_range_is_refused(started_at: str) -> None:
    with pytest.raises(InvalidShape) as refused:
        json_fields.Moment().read(started_at)
    assert refused.value.errors == [limits.TIME_OUT_OF_RANGE]
    assert json_fields.Moment().read("2026-01-01T02:00:00+02:00") == datetime(2026, 1, 1,
                                                                            tzinfo=UTC)


# --- NUL and lone surrogates ----------------------------------------------------------------


@pytest.mark.parametrize(("field", "text", "message"), [
    ("lambda", "x\\u0000", "Null characters are not allowed."),
    ("lambda", "x\\ud800", "Surrogate characters are not allowed: U+D800."),
    ("idempotency_key", "k\\u0000", "Null characters are not allowed."),
    ("idempotency_key", "k\\udfff", "Surrogate characters are not allowed: U+DFFF."),
])
def test_nul_and_lone_surrogates_in_text_are_field_errors(alice: Member, field: str, text: str,
                                                          message: str) -> None:
    body = {"lambda": alice.lam.name, field: "PLACEHOLDER"}
    one = json.dumps(body).replace("PLACEHOLDER", text)
    single = raw_post(alice, "/api/v1/tasks/", one)
    batch = raw_post(alice, "/api/v1/tasks/batch/", f'{{"tasks": [{one}]}}')
    assert (single.status_code, single.json()) == (400, {field: [message]})
    assert (batch.status_code, batch.json()) == (400, {f"tasks[0].{field}": [message]})
    assert not TaskEntity.objects.exists()


@pytest.mark.parametrize("payload", ['{"a": "\\u0000"}', '{"\\u0000": 1}', '["\\ud800"]'])
def test_a_payload_with_nul_or_a_lone_surrogate_is_a_field_error(alice: Member,
                                                                 payload: str) -> None:
    answer = raw_post(alice, "/api/v1/tasks/",
                      f'{{"lambda": "{alice.lam.name}", "payload": {payload}}}')
    assert (answer.status_code, answer.json()) == (400, {"payload": [scheduling.BAD_TEXT]})


@pytest.mark.parametrize(("path", "body"), [
    ("/api/v1/tasks/", '{"lambda": "alpha.work", "x\\ud800": 1}'),
    ("/api/v1/tasks/batch/", '{"tasks": [{"lambda": "alpha.work", "x\\ud800": 1}]}'),
    ("/api/v1/lambdas/alpha.work/gate/", '{"state": "x\\ud800"}'),
])
def test_errors_that_echo_a_lone_surrogate_are_answered(alice: Member, path: str,
                                                        body: str) -> None:
    answer = raw_post(alice, path, body)
    assert answer.status_code == 400
    # The surrogate is written escaped, as a backslash and its code: "x\\ud800".
    assert r"x\\ud800" in answer.content.decode()


# --- attempt history --------------------------------------------------------------------------


def _attempts(task: TaskEntity, count: int) -> None:
    now = timezone.now()
    TaskAttempt.objects.bulk_create(
        TaskAttempt(task=task, number=n, worker="w", started_at=now, ended_at=now,
                    outcome="retry", error={"message": f"m{n}"}) for n in range(1, count + 1))


def test_a_task_shows_its_latest_attempts_and_pages_through_all(alice: Member,
                                                                bob: Member) -> None:
    # Given a task with more attempts than its answer shows
    task = TaskFactory(lambda_ref=alice.lam, status="dead")
    _attempts(task, SHOWN_ATTEMPTS + 5)
    # When it is read, and its attempts are paged through
    shown = alice.client.get(f"/api/v1/tasks/{task.pk}/").json()
    numbers, url = [], f"/api/v1/tasks/{task.pk}/attempts/?page_size=10"
    while url:
        page = alice.client.get(url).json()
        numbers += [attempt["number"] for attempt in page["results"]]
        url = page["next"]
    # Then the answer holds the latest ones, oldest first, and the count of all
    assert [a["number"] for a in shown["attempt_history"]] == list(range(6, SHOWN_ATTEMPTS + 6))
    assert shown["attempt_history_count"] == SHOWN_ATTEMPTS + 5
    # And the pages hold every one of them, oldest first
    assert numbers == list(range(1, SHOWN_ATTEMPTS + 6))
    # And another team sees none of them
    assert bob.client.get(f"/api/v1/tasks/{task.pk}/attempts/").status_code == 404
    assert alice.client.get(f"/api/v1/tasks/{task.pk}/attempts/?x=1").status_code == 400


def test_a_requeue_answers_the_bounded_history(alice: Member) -> None:
    task = TaskFactory(lambda_ref=alice.lam, status="dead")
    _attempts(task, SHOWN_ATTEMPTS + 1)
    answer = alice.client.post(f"/api/v1/tasks/{task.pk}/requeue/").json()
    assert len(answer["attempt_history"]) == SHOWN_ATTEMPTS
    assert answer["attempt_history_count"] == SHOWN_ATTEMPTS + 1


# --- another team's lambda names --------------------------------------------------------------


def _unknown_and_theirs(alice: Member, bob: Member, send: Any) -> tuple[Any, Any]:
    """The answers to `send(alice, name)` for an unknown name and for bob's lambda, with the
    name replaced, so that the two can be compared."""
    unknown, theirs = send(alice, "nobody.knows"), send(alice, bob.lam.name)
    shown = json.dumps(theirs.json()).replace(bob.lam.name, "nobody.knows")
    return (unknown.status_code, unknown.json()), (theirs.status_code, json.loads(shown))


@pytest.mark.parametrize("extra", [{}, {"run_at": "soon"}, {"priority": "urgent"}])
def test_another_teams_lambda_is_answered_as_an_unknown_one(alice: Member, bob: Member,
                                                            extra: dict[str, Any]) -> None:
    def single(who: Member, name: str) -> Any:
        return schedule(who, **{"lambda": name, **extra})

    def batch(who: Member, name: str) -> Any:
        return who.client.post("/api/v1/tasks/batch/", {"tasks": [
            {"lambda": who.lam.name}, {"lambda": name, **extra}]}, format="json")

    for send in (single, batch):
        unknown, theirs = _unknown_and_theirs(alice, bob, send)
        assert unknown[0] == 400
        assert theirs == unknown
    assert not TaskEntity.objects.exists()


def test_a_periodic_task_on_another_teams_lambda_is_answered_as_an_unknown_one(
        alice: Member, bob: Member) -> None:
    def create(who: Member, name: str) -> Any:
        return who.client.post("/api/v1/periodic-tasks/", {"name": "p", "lambda": name,
                                                           "interval": 60}, format="json")

    unknown, theirs = _unknown_and_theirs(alice, bob, create)
    assert unknown == (400, {"lambda": ["Unknown lambda 'nobody.knows'."]})
    assert theirs == unknown
    assert create(alice, alice.lam.name).status_code == 201

    def change(who: Member, name: str) -> Any:
        return who.client.patch("/api/v1/periodic-tasks/p/", {"lambda": name}, format="json")

    unknown, theirs = _unknown_and_theirs(alice, bob, change)
    assert theirs == unknown == (400, {"lambda": ["Unknown lambda 'nobody.knows'."]})
    assert PeriodicTask.objects.get(name="p").lambda_ref_id == alice.lam.pk


@pytest.mark.parametrize("send", [
    lambda who, name: who.client.post("/api/v1/dead-letters/requeue/", {"lambda": name},
                                      format="json"),
    lambda who, name: who.client.get(f"/api/v1/dead-letters/?lambda={name}"),
    lambda who, name: who.client.get(f"/api/v1/tasks/?lambda={name}"),
    lambda who, name: who.client.get(f"/api/v1/lambdas/{name}/"),
])
def test_other_endpoints_taking_a_lambda_name_answer_as_for_an_unknown_one(
        alice: Member, bob: Member, send: Any) -> None:
    TaskFactory(lambda_ref=bob.lam, status="dead")
    unknown, theirs = _unknown_and_theirs(alice, bob, send)
    assert theirs == unknown


def test_a_taken_worker_id_is_a_409_that_names_no_team(queue: QueueBackend) -> None:
    team_a, team_b = worker_member("wa"), worker_member("wb")
    body = {"worker": "host:1:taken", "host": "h", "pid": 1, "threads": 1}
    assert post(team_a.client, "register/", {**body, "lambdas": ["wa.work"]}).status_code == 201
    answer = post(team_b.client, "register/", {**body, "lambdas": ["wb.work"]})
    assert (answer.status_code, answer.json()) == (
        409, {"detail": "worker 'host:1:taken' is registered already"})
