"""ATF in a host project (tests/host_project): a Django project with its own REST_FRAMEWORK
defaults, no LOGGING and no SPECTACULAR_SETTINGS, run as child processes on this test run's
database and Redis. What a team meets there: the API's schema, docs page and policy, the
console's dashboard from the admin index, and workers that say what they do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection

from tasks_core import atf
from tasks_core.conf import atf_settings
from tasks_core.models import Lambda, TaskEntity
from tests.conftest import ROOT, Processes, wait_for
from tests.factories import TaskFactory
from tests.integration.tasks_api.test_api_support import member

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def host_env(**overrides: str) -> dict[str, str]:
    """The host project's environment: its settings, this run's database, Redis and prefix."""
    db = connection.settings_dict
    env = {
        "PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"),
        "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT),
        "DJANGO_SETTINGS_MODULE": "tests.host_project.settings",
        "HOST_DB_NAME": db["NAME"], "HOST_DB_HOST": db["HOST"], "HOST_DB_PORT": str(db["PORT"]),
        "HOST_DB_USER": db["USER"], "REDIS_URL": settings.REDIS_URL,
        "HOST_QUEUE_PREFIX": f"{atf_settings.queue_prefix}-host",
    }
    env.update(overrides)
    return env


def host_shell(code: str, **env: str) -> dict:
    """Run `code` in the host project's `manage.py shell`; the JSON its last line prints."""
    done = subprocess.run([sys.executable, "-m", "django", "shell", "-c", textwrap.dedent(code)],
                          cwd=ROOT, env=host_env(**env), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


WEB = """
    import json, os, re, threading
    from django.contrib.auth.models import User
    from django.db import connection
    from django.test import Client
    from drf_spectacular.settings import spectacular_settings

    # A view's exception comes back as its 500, as a browser would meet it.
    root, anonymous = Client(raise_request_exception=False), Client(raise_request_exception=False)
    root.force_login(User.objects.get(username="root"))
    token = Client(raise_request_exception=False,
                   HTTP_AUTHORIZATION="Token " + os.environ["PROBE_TOKEN"])

    def answer(response):
        return {"status": response.status_code, "type": response.get("Content-Type", ""),
                "body": response.json() if "json" in response.get("Content-Type", "") else None}

    def fetch_schema():
        client = Client(raise_request_exception=False)
        client.force_login(User.objects.get(username="root"))
        client.get("/atf/api/schema/?format=json")
        connection.close()

    # Schemas asked for at once, as the host's SPECTACULAR_SETTINGS stand
    at_once = [threading.Thread(target=fetch_schema) for _ in range(3)]
    for thread in at_once:
        thread.start()
    for thread in at_once:
        thread.join()
    host_title = spectacular_settings.TITLE
    schema = root.get("/atf/api/schema/?format=json")
    docs = root.get("/atf/api/docs/").content.decode()
    index = root.get("/admin/").content.decode()
    dashboard = root.get("/admin/tasks_console/dashboard/")
    data = root.get("/admin/tasks_console/dashboard/data.json")
    print(json.dumps({
        "schema": schema.status_code,
        "paths": sorted(schema.json()["paths"]) if schema.status_code == 200 else [],
        "host_title": [host_title, spectacular_settings.TITLE],
        "atf_title": schema.json()["info"]["title"] if schema.status_code == 200 else None,
        "docs_assets": re.findall(r'(?:src|href)="([^"]*)"', docs),
        "docs_absolute_urls": re.findall(r"[a-z]+://[^\\s\\"']+", docs),
        "anonymous": [answer(anonymous.get("/atf/api/v1/tasks/")) for _ in range(2)],
        "listed": answer(token.get("/atf/api/v1/tasks/")),
        "form_post": answer(token.post("/atf/api/v1/tasks/", {"lambda": "alpha.work"})),
        "options": token.options("/atf/api/v1/tasks/").status_code,
        "index_links": re.findall(r'href="(/admin/tasks_console/[^"]*)"', index),
        "dashboard": dashboard.status_code,
        "dashboard_data": re.findall(r'var url = "([^"]*)"', dashboard.content.decode()),
        "data": sorted(data.json()) if data.status_code == 200 else data.status_code,
    }))
"""


def test_the_api_and_console_hold_in_a_host_project_with_its_own_drf_defaults() -> None:
    # Given a host project whose REST_FRAMEWORK is open (AllowAny, basic auth, page-number
    # pagination of 1, a search filter, form parsing, a browsable renderer only, an anonymous
    # throttle of 1 a day, DRF's schema class, query-parameter versioning, no metadata, an
    # error handler of its own), and two tasks of a team's lambda
    alice = member("alpha")
    TaskFactory.create_batch(2, lambda_ref=alice.lam)
    get_user_model().objects.create_superuser("root", "root@example.com", "pw")
    # When a superuser, a token holder and a stranger use ATF's pages there
    seen = host_shell(WEB, PROBE_TOKEN=alice.token)
    # Then the schema answers, lists ATF's views where the host mounted them and no other
    assert seen["schema"] == 200
    assert "/atf/api/v1/tasks/" in seen["paths"] and "/atf/healthz" in seen["paths"]
    assert all(path.startswith("/atf/") for path in seen["paths"]), seen["paths"]
    # with ATF's title, while the host's own drf-spectacular settings stay its own, also after
    # several ATF schemas were built at once
    assert seen["atf_title"] == "ATF for Django"
    assert seen["host_title"] == ["", ""]
    # and the docs page loads Swagger UI from the site's static files, nothing from elsewhere
    assert seen["docs_assets"] and all(
        url.startswith("/static/drf_spectacular_sidecar/") for url in seen["docs_assets"])
    assert seen["docs_absolute_urls"] == []
    # and the API keeps its own authentication, throttling, renderer and error shape
    assert [a["status"] for a in seen["anonymous"]] == [401, 401]
    assert seen["anonymous"][0]["type"] == "application/json"
    assert set(seen["anonymous"][0]["body"]) == {"detail"}
    # its own pagination
    listed = seen["listed"]
    assert listed["status"] == 200 and len(listed["body"]["results"]) == 2
    assert "count" not in listed["body"]
    # its own parsers (JSON only) and metadata
    assert seen["form_post"]["status"] == 415
    assert "host_error" not in seen["form_post"]["body"]
    assert seen["options"] == 200
    # And the admin index links the dashboard, which the admin serves with its data
    assert "/admin/tasks_console/dashboard/" in seen["index_links"]
    assert seen["dashboard"] == 200
    assert seen["dashboard_data"] == ["/admin/tasks_console/dashboard/data.json"]
    assert seen["data"] == ["panels", "updated"]


def _finished(count: int) -> bool:
    return TaskEntity.objects.filter(status__in=["success", "fatal_failure"]).count() >= count


@pytest.mark.parametrize(
    ("level", "verbosity", "says"),
    [
        # No ATF_LOG_LEVEL: INFO, the start lines and the summary of finished tasks
        (None, "1", ["consumer started", "worker", "started: 2 thread(s)",
                     "2 task(s) finished", "'success': 1"]),
        (None, "2", ["started: 2 thread(s)", "(host.greet) succeeded"]),
        ("WARNING", "1", []),
    ],
    ids=["default", "verbosity-2", "ATF_LOG_LEVEL=WARNING"],
)
def test_workers_say_what_they_do_in_a_host_project_without_logging(
        processes: Processes, level: str | None, verbosity: str, says: list[str]) -> None:
    # Given the host project (no LOGGING), its consumer and worker started as a person would
    env = host_env(**({"HOST_ATF_LOG_LEVEL": level} if level else {}))

    def start(*args: str) -> Callable[[], str]:
        child = processes.spawn(args[0], [sys.executable, "-m", "django", *args,
                                          "--verbosity", verbosity], env=env, cwd=ROOT)
        return lambda: Path(child.log_path).read_text()  # type: ignore[attr-defined]

    consumer_log = start("runconsumer", "--poll-interval", "0.2")
    wait_for(lambda: Lambda.objects.filter(name="host.refuse").exists(),
             message="the consumer to sync the host's lambdas")
    worker_log = start("runworker", "--threads", "2")
    # When a task succeeds and one fails for good
    atf.schedule("host.greet", {"name": "ann"})
    failing = atf.schedule("host.refuse", {})
    wait_for(lambda: _finished(2), message="both tasks to finish")
    # Then the failure is on stderr at any level, and the rest as the level says
    error = f"ERROR MainProcess workers.results: task {failing.pk} (host.refuse) ended " \
            "fatal_failure after attempt 1: Fatal: refused on purpose"
    wait_for(lambda: error in worker_log(), message=f"{error!r} in the worker's output")
    for line in says:
        wait_for(lambda line=line: line in consumer_log() + worker_log(), timeout_s=30,
                 message=f"{line!r} in the output")
    if level == "WARNING":
        assert " INFO " not in consumer_log() + worker_log()
