"""Staff only; a staff user sees and acts only on their teams' lambdas, unless they hold the
`tasks_core.view_all_teams` permission (superusers do)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from django.contrib.auth.models import AbstractBaseUser, Permission
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from tasks_core.models import Lambda, TaskEntity, Worker
from tasks_core.states import TaskStatus
from tests.factories import LambdaFactory, TaskFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db

LAMBDAS = reverse("admin:tasks_core_lambda_changelist")
TASKS = reverse("admin:tasks_core_taskentity_changelist")
DEAD = reverse("admin:tasks_console_deadletter_changelist")
DASHBOARD = reverse("tasks_console:dashboard")
#: The dashboard where the standalone service mounts it, and as the admin's own entry.
DASHBOARDS = pytest.mark.parametrize(
    "dashboard_url", [DASHBOARD, reverse("admin:tasks_console_dashboard_changelist")])


@dataclass(frozen=True, kw_only=True)
class TwoTeams:
    client: Client  #: logged in as a staff member of team "payments" only
    mine: Lambda
    theirs: Lambda
    my_task: TaskEntity
    their_task: TaskEntity


def staff_of(*team_names: str, superuser: bool = False) -> AbstractBaseUser:
    user = UserFactory(is_staff=True, is_superuser=superuser)
    for name in team_names:
        TeamFactory(name=name).members.add(user)
    return user


@pytest.fixture
def two_teams(client: Client) -> TwoTeams:
    mine = LambdaFactory(name="payments.charge", team=TeamFactory(name="payments"))
    theirs = LambdaFactory(name="search.reindex", team=TeamFactory(name="search"))
    client.force_login(staff_of("payments"))
    return TwoTeams(client=client, mine=mine, theirs=theirs,
                    my_task=TaskFactory(lambda_ref=mine, status=TaskStatus.DEAD,
                                        finished_at=timezone.now()),
                    their_task=TaskFactory(lambda_ref=theirs, status=TaskStatus.DEAD,
                                           finished_at=timezone.now()))


def act(client: Client, url: str, action: str, ids: list[int], **extra: str) -> object:
    data = {"action": action, "index": "0", "_selected_action": [str(pk) for pk in ids], **extra}
    return client.post(url, data)


def listed(client: Client, url: str) -> set[int]:
    return {row.pk for row in client.get(url).context["cl"].result_list}


def test_lists_show_only_the_users_teams(two_teams: TwoTeams) -> None:
    # Given a staff member of "payments"
    client = two_teams.client
    # When they open the lambda, task and dead-letter lists
    lambdas, tasks, dead = listed(client, LAMBDAS), listed(client, TASKS), listed(client, DEAD)
    # Then only their team's rows are there
    assert lambdas == {two_teams.mine.pk}
    assert tasks == dead == {two_teams.my_task.pk}


@pytest.mark.parametrize("url", [
    LAMBDAS, TASKS, DEAD, reverse("admin:tasks_core_collection_changelist"),
    reverse("admin:tasks_api_apitoken_changelist"),
])
def test_team_filters_list_only_the_users_teams(two_teams: TwoTeams, url: str) -> None:
    # Given a staff member of "payments", and a team "search" they are not in
    # When they open a list with a team filter
    specs = two_teams.client.get(url).context["cl"].filter_specs
    (team_filter,) = [spec for spec in specs if spec.title == "team"]
    # Then its choices are their teams only: the other team's name is not told
    assert [label for _value, label in team_filter.lookup_choices] == ["payments"]


def test_another_teams_task_and_lambda_pages_are_not_found(two_teams: TwoTeams) -> None:
    # Given the other team's task and lambda
    task_page = reverse("admin:tasks_core_taskentity_change", args=[two_teams.their_task.pk])
    lambda_page = reverse("admin:tasks_core_lambda_change", args=[two_teams.theirs.pk])
    # When the staff member opens their pages
    responses = [two_teams.client.get(url) for url in (task_page, lambda_page)]
    # Then the admin answers as for a missing object: back to the front page
    assert [r.status_code for r in responses] == [302, 302]
    assert all(r.url == reverse("admin:index") for r in responses)


def test_gate_actions_on_another_teams_lambda_change_nothing(two_teams: TwoTeams) -> None:
    # Given the other team's open lambda
    # When the staff member posts pause and drop for it
    for action in ("pause_gate", "drop_gate"):
        act(two_teams.client, LAMBDAS, action, [two_teams.theirs.pk], apply="1", until="")
    # Then its gate is still open
    two_teams.theirs.refresh_from_db()
    assert two_teams.theirs.gate == "open"


def test_task_actions_on_another_teams_tasks_change_nothing(two_teams: TwoTeams) -> None:
    # Given the other team's dead task
    their = two_teams.their_task
    # When the staff member posts requeue for it, from the task list and the dead-letter page
    act(two_teams.client, TASKS, "requeue_tasks", [their.pk])
    act(two_teams.client, DEAD, "requeue_dead", [their.pk])
    act(two_teams.client, DEAD, "discard_dead", [their.pk], apply="1")
    # Then it is still dead, and their own task was not touched either
    assert TaskEntity.objects.get(pk=their.pk).status == TaskStatus.DEAD
    assert TaskEntity.objects.get(pk=two_teams.my_task.pk).status == TaskStatus.DEAD


def test_own_team_actions_work(two_teams: TwoTeams) -> None:
    # Given their own team's lambda and dead task
    # When the staff member pauses the lambda and requeues the task
    act(two_teams.client, LAMBDAS, "pause_gate", [two_teams.mine.pk], apply="1", until="")
    act(two_teams.client, DEAD, "requeue_dead", [two_teams.my_task.pk])
    # Then both happen
    two_teams.mine.refresh_from_db()
    assert two_teams.mine.gate == "paused"
    assert TaskEntity.objects.get(pk=two_teams.my_task.pk).status == TaskStatus.NEW


@DASHBOARDS
def test_dashboard_shows_only_the_users_lambdas(two_teams: TwoTeams, redis_client: object,
                                                dashboard_url: str) -> None:
    # Given a failure in each team's lambda
    # When the staff member opens the dashboard
    page = two_teams.client.get(dashboard_url)
    # Then it counts their own task only and never names the other team's lambda
    text = page.content.decode()
    assert page.status_code == 200
    assert "payments.charge" in text and "search.reindex" not in text
    assert page.context["cards"][4] == ("dead letters", 1)


@DASHBOARDS
@pytest.mark.parametrize("kind", ["anonymous", "not staff", "staff without a team"])
def test_others_cannot_use_the_console(client: Client, kind: str, dashboard_url: str) -> None:
    # Given a visitor who is not a console user
    if kind == "not staff":
        client.force_login(UserFactory(is_staff=False))
    elif kind == "staff without a team":
        client.force_login(staff_of())
    TaskFactory()
    # When they open the dashboard and the task list
    dashboard, tasks = client.get(dashboard_url), client.get(TASKS)
    # Then they are sent to log in, or refused
    if kind == "staff without a team":
        assert (dashboard.status_code, tasks.status_code) == (403, 403)
    else:
        assert dashboard.status_code == tasks.status_code == 302
        assert dashboard.url.startswith(reverse("admin:login"))


def test_a_superuser_sees_every_team(client: Client) -> None:
    # Given tasks of two teams and a superuser in neither
    tasks = {TaskFactory().pk, TaskFactory().pk}
    client.force_login(staff_of(superuser=True))
    # When the task list opens
    # Then both are listed
    assert listed(client, TASKS) == tasks


def test_the_view_all_teams_permission_sees_every_team(client: Client) -> None:
    # Given tasks of two teams and a staff user in neither, who holds the explicit permission
    tasks = {TaskFactory().pk, TaskFactory().pk}
    user = staff_of()
    user.user_permissions.add(Permission.objects.get(codename="view_all_teams"))
    client.force_login(user)
    # When the dashboard and the task list open
    # Then they open, and both tasks are listed
    assert client.get(DASHBOARD).status_code == 200
    assert listed(client, TASKS) == tasks


def test_workers_show_only_the_users_lambdas(two_teams: TwoTeams, redis_client: object) -> None:
    # Given a live worker that serves one lambda of each team, one that serves only the other
    # team's, and one that serves every registered lambda
    now = timezone.now()
    for worker_id, lambdas in [("shared", ["search.reindex", "payments.charge"]),
                               ("theirs", ["search.reindex"]), ("any", [])]:
        Worker.objects.create(worker_id=worker_id, host="h", pid=1, lambdas=lambdas,
                              started_at=now, last_seen=now)
    shared = Worker.objects.get(worker_id="shared")
    # When the staff member of "payments" opens the workers page, a worker's page and the
    # dashboard
    workers = two_teams.client.get(reverse("admin:tasks_core_worker_changelist"))
    detail = two_teams.client.get(reverse("admin:tasks_core_worker_change", args=[shared.pk]))
    dashboard = two_teams.client.get(DASHBOARD)
    # Then the workers that serve their lambdas are listed, and no page names the other
    # team's lambda
    assert {w.worker_id for w in workers.context["cl"].result_list} == {"shared", "any"}
    assert [w["worker_id"] for w in dashboard.context["workers"]] == ["shared", "any"]
    for page in (workers, detail, dashboard):
        text = page.content.decode()
        assert page.status_code == 200
        assert "payments.charge" in text and "search.reindex" not in text
