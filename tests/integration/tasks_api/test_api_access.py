"""Who may call what: 401 without credentials, team isolation, staff, throttling, tokens."""

from __future__ import annotations

import io
import logging

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.test import override_settings
from rest_framework.test import APIClient

from tasks_api.throttling import parse_rate
from tasks_core import redaction
from tasks_core.models import Lambda, TaskEntity, Team
from tasks_core.states import TaskStatus
from tests.factories import TaskFactory
from tests.integration.tasks_api.test_api_support import Member, schedule, token_client

pytestmark = pytest.mark.django_db

#: Every authenticated endpoint, with a method it answers.
ENDPOINTS = [
    ("get", "/api/v1/tasks/"),
    ("post", "/api/v1/tasks/"),
    ("post", "/api/v1/tasks/batch/"),
    ("get", "/api/v1/tasks/1/"),
    ("post", "/api/v1/tasks/1/cancel/"),
    ("get", "/api/v1/lambdas/"),
    ("get", "/api/v1/lambdas/demo.noop/"),
    ("post", "/api/v1/lambdas/demo.noop/gate/"),
    ("post", "/api/v1/lambdas/demo.noop/collections/default/gate/"),
    ("get", "/api/v1/dead-letters/"),
    ("post", "/api/v1/dead-letters/requeue/"),
    ("post", "/api/v1/dead-letters/discard/"),
    ("get", "/api/v1/stats/"),
    ("get", "/api/schema/"),
    ("get", "/metrics"),
]




@pytest.mark.parametrize(("method", "path"), ENDPOINTS)
def test_no_credentials_answer_401_with_a_challenge(method: str, path: str) -> None:
    # When an endpoint is called without credentials, or with a bad token
    anonymous = getattr(APIClient(), method)(path, {}, format="json")
    forged = APIClient()
    forged.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")
    bad_token = getattr(forged, method)(path, {}, format="json")
    # Then the answer is a JSON 401 that says how to authenticate
    for response in (anonymous, bad_token):
        assert response.status_code == 401
        assert response["WWW-Authenticate"] == "Token"
        assert "detail" in response.json()


def test_probes_need_no_credentials() -> None:
    # /healthz and /readyz answer anyone, even with a bad token
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token bad")
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json() == {"status": "ok", "checks": {"database": "ok", "queue": "ok"}}


def test_readyz_answers_503_when_the_queue_is_unreachable_and_logs_no_password(
        settings: object, caplog: pytest.LogCaptureFixture) -> None:
    # Given a Redis URL with a password, on a port where nothing listens
    settings.ATF_REDIS_URL = "redis://atf:s3cret-pw@127.0.0.1:1/0"  # type: ignore[attr-defined]
    # When /readyz checks it
    with caplog.at_level(logging.DEBUG):
        response = APIClient().get("/readyz")
    # Then it answers unavailable, and what it logged names the server but not the password
    assert response.status_code == 503
    assert response.json()["checks"] == {"database": "ok", "queue": "unavailable"}
    assert "redis://atf:***@127.0.0.1:1/0" in caplog.text
    assert "s3cret-pw" not in caplog.text + response.content.decode()


@pytest.mark.parametrize(("url", "shown"), [
    ("redis://:pw@h:6379/0", "redis://:***@h:6379/0"),
    ("rediss://user:pw@h/1?ssl_cert_reqs=none", "rediss://user:***@h/1?ssl_cert_reqs=none"),
    ("redis://h:6379/0", "redis://h:6379/0"),
    ("unix:///run/redis.sock", "unix:///run/redis.sock"),
    ("redis://u:pw@[::1", "***"),  # does not parse: shown as nothing at all
])
def test_urls_are_shown_without_their_password(url: str, shown: str) -> None:
    assert redaction.url(url) == shown


def test_docs_send_an_anonymous_browser_to_log_in() -> None:
    response = APIClient().get("/api/docs/")
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/?next=/api/docs/")


def test_team_b_cannot_see_or_touch_team_as_tasks(alice: Member, bob: Member) -> None:
    # Given a task and a dead task of team A
    task = TaskFactory(lambda_ref=alice.lam)
    dead = TaskFactory(lambda_ref=alice.lam, status=TaskStatus.DEAD)
    # When team B reads, lists, cancels, requeues and discards them
    assert bob.client.get(f"/api/v1/tasks/{task.pk}/").status_code == 404
    assert bob.client.post(f"/api/v1/tasks/{task.pk}/cancel/").status_code == 404
    assert bob.client.get("/api/v1/tasks/").json()["results"] == []
    assert bob.client.get(f"/api/v1/tasks/?lambda={alice.lam.name}").json()["results"] == []
    assert bob.client.get("/api/v1/dead-letters/").json()["results"] == []
    by_ids = {"ids": [task.pk, dead.pk]}
    assert bob.client.post("/api/v1/dead-letters/requeue/", by_ids,
                           format="json").json() == {"requeued": 0}
    assert bob.client.post("/api/v1/dead-letters/discard/", by_ids,
                           format="json").json() == {"discarded": 0}
    by_lambda = {"lambda": alice.lam.name}
    assert bob.client.post("/api/v1/dead-letters/requeue/", by_lambda,
                           format="json").status_code == 400
    # Then nothing changed, and team A still sees its tasks
    assert TaskEntity.objects.get(pk=task.pk).status == TaskStatus.NEW
    assert TaskEntity.objects.get(pk=dead.pk).status == TaskStatus.DEAD
    assert alice.client.get(f"/api/v1/tasks/{task.pk}/").status_code == 200


def test_team_b_cannot_see_gate_or_schedule_on_team_as_lambda(alice: Member,
                                                               bob: Member) -> None:
    # When team B reads, lists, gates and schedules on team A's lambda
    name = alice.lam.name
    assert bob.client.get(f"/api/v1/lambdas/{name}/").status_code == 404
    assert [lam["name"] for lam in bob.client.get("/api/v1/lambdas/").json()] == [bob.lam.name]
    paused = {"state": "paused"}
    assert bob.client.post(f"/api/v1/lambdas/{name}/gate/", paused,
                           format="json").status_code == 404
    assert bob.client.post(f"/api/v1/lambdas/{name}/collections/default/gate/", paused,
                           format="json").status_code == 404
    assert schedule(bob, **{"lambda": name}).json() == {"lambda": [f"Unknown lambda {name!r}."]}
    # Then the lambda is untouched and has no task
    assert Lambda.objects.get(pk=alice.lam.pk).gate == "open"
    assert not alice.lam.collections.exists()
    assert not TaskEntity.objects.exists()


def test_stats_and_metrics_show_only_the_callers_lambdas(alice: Member, bob: Member) -> None:
    TaskFactory(lambda_ref=alice.lam)
    stats = bob.client.get("/api/v1/stats/").json()
    assert stats["counts"]["new"] == 0
    assert alice.lam.name not in stats["counts_by_lambda"]
    assert alice.lam.name not in (stats["queue_depths"] or {})
    assert alice.lam.name not in bob.client.get("/metrics").content.decode()
    assert alice.lam.name in alice.client.get("/metrics").content.decode()


def test_a_member_of_two_teams_sees_both(alice: Member, bob: Member) -> None:
    bob.team.members.add(alice.user)
    names = [lam["name"] for lam in alice.client.get("/api/v1/lambdas/").json()]
    assert names == sorted([alice.lam.name, bob.lam.name])
    assert schedule(alice, **{"lambda": bob.lam.name}).status_code == 201


def _sees_and_acts_on(client: APIClient, owner: Member) -> dict[str, bool]:
    """What a client could do with `owner`'s things: each key is True when it worked."""
    task = TaskFactory(lambda_ref=owner.lam)
    stats = client.get("/api/v1/stats/").json()
    return {
        "read": client.get(f"/api/v1/tasks/{task.pk}/").status_code == 200,
        "list": bool(client.get("/api/v1/tasks/").json()["results"]),
        "cancel": client.post(f"/api/v1/tasks/{task.pk}/cancel/").status_code == 200,
        "gate": client.post(f"/api/v1/lambdas/{owner.lam.name}/gate/", {"state": "paused"},
                            format="json").status_code == 200,
        "schedule": client.post("/api/v1/tasks/", {"lambda": owner.lam.name},
                                format="json").status_code == 201,
        "stats": owner.lam.name in stats["counts_by_lambda"],
        "metrics": owner.lam.name in client.get("/metrics").content.decode(),
    }


NOTHING = dict.fromkeys(["read", "list", "cancel", "gate", "schedule", "stats", "metrics"],
                        False)
EVERYTHING = dict.fromkeys(NOTHING, True)


def test_staff_of_one_team_have_no_rights_on_another(alice: Member, bob: Member) -> None:
    # Given a staff member of team B (staff only opens the console)
    bob.user.is_staff = True
    bob.user.save(update_fields=["is_staff"])
    # Then it can neither see nor act on team A's tasks and lambdas
    assert _sees_and_acts_on(bob.client, alice) == NOTHING
    assert Lambda.objects.get(pk=alice.lam.pk).gate == "open"


def test_staff_in_no_team_have_no_rights(alice: Member) -> None:
    staff = get_user_model().objects.create(username="operator", is_staff=True)
    assert _sees_and_acts_on(token_client(staff), alice) == NOTHING


def test_the_view_all_teams_permission_sees_and_acts_on_every_team(alice: Member) -> None:
    # Given a user in no team, not staff, holding the explicit permission
    user = get_user_model().objects.create(username="auditor")
    user.user_permissions.add(Permission.objects.get(codename="view_all_teams"))
    # Then it reads, lists, cancels, gates and schedules on any team's lambda
    assert _sees_and_acts_on(token_client(user), alice) == EVERYTHING


def test_a_superuser_sees_and_acts_on_every_team(alice: Member) -> None:
    root = get_user_model().objects.create(username="root", is_superuser=True)
    assert _sees_and_acts_on(token_client(root), alice) == EVERYTHING


def test_a_session_works_too(alice: Member) -> None:
    client = APIClient()
    client.force_login(alice.user)
    assert client.get("/api/v1/lambdas/").status_code == 200


@override_settings(ATF_API_THROTTLE_RATE="3/min")
def test_throttled_per_token_with_retry_after(alice: Member, bob: Member,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a clock in the middle of a minute (the window is the clock's minute: requests
    # that straddled two minutes were counted in two windows), a minute no other run used
    import secrets
    from types import SimpleNamespace

    from tasks_api import throttling

    middle = 60.0 * (29_000_000 + secrets.randbelow(10**9)) + 30.0
    monkeypatch.setattr(throttling, "time", SimpleNamespace(time=lambda: middle))
    # When one token makes more requests than the rate allows
    codes = [alice.client.get("/api/v1/lambdas/").status_code for _ in range(4)]
    # Then the extra one is refused with a time to wait, and another token is not
    assert codes == [200, 200, 200, 429]
    refused = alice.client.get("/api/v1/lambdas/")
    assert 1 <= int(refused["Retry-After"]) <= 60
    assert "detail" in refused.json()
    assert bob.client.get("/api/v1/lambdas/").status_code == 200


def test_metrics_in_prometheus_text(alice: Member) -> None:
    TaskFactory(lambda_ref=alice.lam)
    response = alice.client.get("/metrics", HTTP_ACCEPT="text/plain;version=0.0.4;q=0.5,*/*")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    text = response.content.decode()
    assert f'atf_tasks{{lambda="{alice.lam.name}",status="new"}} 1.0' in text
    assert f'atf_queue_depth{{lambda="{alice.lam.name}",priority="high"}} 0.0' in text
    assert 'atf_delivery_latency_seconds_bucket{le="+Inf"} 0.0' in text
    assert "atf_workers 0.0" in text


@override_settings(ATF_METRICS_PUBLIC=True)
def test_metrics_can_be_public(alice: Member) -> None:
    TaskFactory(lambda_ref=alice.lam)
    response = APIClient().get("/metrics")
    assert response.status_code == 200
    assert alice.lam.name in response.content.decode()


def test_schema_and_docs_are_served_from_installed_packages(alice: Member) -> None:
    schema = alice.client.get("/api/schema/?format=json")
    assert schema.status_code == 200
    assert "/api/v1/tasks/" in schema.json()["paths"]
    browser = APIClient()
    browser.force_login(alice.user)
    page = browser.get("/api/docs/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "drf_spectacular_sidecar/swagger-ui-dist" in html
    assert "cdn" not in html.lower()


def test_atf_token_creates_team_and_user_and_prints_a_working_token() -> None:
    # When the command runs for a new team and user
    out = io.StringIO()
    call_command("atf_token", "ops", "carol", stdout=out, stderr=io.StringIO())
    token = out.getvalue().strip().splitlines()[-1]
    # Then both exist, carol is a member, and the token works
    carol = get_user_model().objects.get(username="carol")
    assert Team.objects.get(name="ops").members.filter(pk=carol.pk).exists()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert client.get("/api/v1/lambdas/").status_code == 200
    # And running it again prints a new token (the first is not stored), and both work
    again = io.StringIO()
    call_command("atf_token", "ops", "carol", stdout=again, stderr=io.StringIO())
    second = again.getvalue().strip().splitlines()[-1]
    assert second != token
    client.credentials(HTTP_AUTHORIZATION=f"Token {second}")
    assert client.get("/api/v1/lambdas/").status_code == 200


def test_demo_token_schedules_demo_lambdas() -> None:
    # Given a token of the demo team (what `make demo` prints)
    out = io.StringIO()
    call_command("atf_token", "demo", "demo", stdout=out, stderr=io.StringIO())
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {out.getvalue().split()[-1]}")
    # When it schedules demo.noop
    response = client.post("/api/v1/tasks/", {"lambda": "demo.noop"}, format="json")
    # Then the task is created
    assert response.status_code == 201, response.json()


@pytest.mark.parametrize(("rate", "expected"), [("6000/min", (6000, 60)), ("100/s", (100, 1)),
                                                ("5/hour", (5, 3600)), ("1/day", (1, 86400))])
def test_throttle_rates_parse(rate: str, expected: tuple[int, int]) -> None:
    assert parse_rate(rate) == expected


@pytest.mark.parametrize("rate", ["lots", "10/fortnight", "ten/min"])
def test_a_bad_throttle_rate_says_how_to_write_one(rate: str) -> None:
    with pytest.raises(ImproperlyConfigured, match="6000/min"):
        parse_rate(rate)
