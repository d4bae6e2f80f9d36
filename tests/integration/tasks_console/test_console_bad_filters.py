"""A bad filter value on a console page shows an empty or unfiltered list with a message; it is
never a 500 (values of the wrong type, NUL characters, numbers out of range, over-long text).

A lone surrogate cannot reach a view through a URL: Django decodes query strings with
replacement characters."""

from __future__ import annotations

import pytest
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse

from tasks_core.models import Lambda, TaskAttempt, TaskEntity
from tasks_core.states import TaskStatus
from tests.factories import LambdaFactory, TaskFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db

TASKS = reverse("admin:tasks_core_taskentity_changelist")
DEAD = reverse("admin:tasks_console_deadletter_changelist")
ATTEMPTS = reverse("admin:tasks_core_taskattempt_changelist")
LAMBDAS = reverse("admin:tasks_core_lambda_changelist")
PERIODIC = reverse("admin:tasks_core_periodictask_changelist")
WORKERS = reverse("admin:tasks_core_worker_changelist")
AUTOCOMPLETE = reverse("admin:autocomplete")

BAD_VALUES = ["abc", "\x00", "a\x00b", "9" * 40, "-1", "1.5", "x" * 5000]
PAGES = {
    TASKS: ["lambda", "team", "collection", "priority", "status__exact", "q",
            "created_at__gte"],
    DEAD: ["lambda", "team", "collection", "error_type", "error_message", "q",
           "finished_at__gte"],
    ATTEMPTS: ["outcome__exact", "q"],
    LAMBDAS: ["gate__exact", "team", "in_code__exact", "q"],
    PERIODIC: ["lambda", "enabled__exact", "q"],
    WORKERS: ["q"],
}
CASES = [(page, name, value) for page, names in PAGES.items() for name in names
         for value in BAD_VALUES]


@pytest.fixture
def member(client: Client) -> Client:
    lam = LambdaFactory(name="payments.charge", team=TeamFactory(name="payments"))
    user = UserFactory(is_staff=True)
    lam.team.members.add(user)
    dead = TaskFactory(lambda_ref=lam, status=TaskStatus.DEAD,
                       last_error={"type": "E", "message": "m"})
    TaskAttempt.objects.create(task=dead, number=1, started_at=dead.created_at,
                               ended_at=dead.created_at, outcome="dead")
    client.force_login(user)
    return client


def _shown(response: object) -> tuple[int, list[str]]:
    """The status once redirects are followed, and the messages shown."""
    return response.status_code, [str(m) for m in get_messages(response.wsgi_request)]


@pytest.mark.parametrize(("page", "name", "value"), CASES,
                         ids=[f"{p.split('/')[-2]}-{n}-{i}" for p, n, v in CASES
                              for i in [BAD_VALUES.index(v)]])
def test_a_bad_filter_value_never_answers_500(member: Client, page: str, name: str,
                                             value: str) -> None:
    # When a list page is asked for with a bad filter value
    response = member.get(page, {name: value}, follow=True)
    # Then it shows a page, never a server error
    assert response.status_code == 200


@pytest.mark.parametrize("value", ["abc", "\x00", "9" * 40])
def test_a_bad_lambda_filter_shows_the_whole_list_with_a_message(member: Client,
                                                                value: str) -> None:
    response = member.get(TASKS, {"lambda": value}, follow=True)
    code, shown = _shown(response)
    assert code == 200
    assert {t.pk for t in response.context["cl"].result_list} == set(
        TaskEntity.objects.values_list("pk", flat=True))
    assert any("not valid" in line for line in shown), shown


@pytest.mark.parametrize("term", ["\x00", "a\x00", "x" * 5000])
def test_autocomplete_with_a_bad_term_answers_no_results(member: Client, term: str) -> None:
    response = member.get(AUTOCOMPLETE, {"app_label": "tasks_core", "model_name": "periodictask",
                                         "field_name": "lambda_ref", "term": term})
    assert response.status_code == 200
    assert response.json()["results"] == []


def test_autocomplete_still_finds_names(member: Client) -> None:
    response = member.get(AUTOCOMPLETE, {"app_label": "tasks_core", "model_name": "periodictask",
                                         "field_name": "lambda_ref", "term": "pay"})
    assert response.status_code == 200
    assert [r["text"] for r in response.json()["results"]] == [
        str(Lambda.objects.get(name="payments.charge"))]
