"""The django-atf and atf-client distributions: built, checked, installed into a fresh
virtualenv, and used by the example shop (examples/shop) from there, not from this repository:
a new user's journey (settings, migrate, a lambda and a `@task` function, `schedule()` in a
transaction, consumer and worker, console, API, client) on whichever Django runs the suite --
Django 5.2 with the django-tasks backport, or 6.0/6.1 in `make test-matrix`.

The fresh virtualenv gets ATF only from the wheel (`pip install --no-deps --no-index`). Its
third-party dependencies come from this repository's pinned environment, put on its path by a
`.pth` file: that is offline and takes seconds, where resolving them from an index takes a
minute or more and fails without a network. `pip check` in the new venv then proves that the
wheel's declared dependency ranges are met by the pinned set.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path

import django
import psycopg
import pytest
from django.conf import settings

from tasks_core.conf import atf_settings
from tests.conftest import ROOT, Processes, wait_for
from tests.ports import free_port

pytestmark = pytest.mark.slow

SHOP = ROOT / "examples" / "shop"
#: What the sdist is built from: the distribution's packages and the files pyproject.toml names.
SOURCES = ["pyproject.toml", "README.md", "CHANGELOG.md", "MANIFEST.in", "tasks_core",
           "tasks_api", "tasks_console", "workers", "atf_client", "clients"]


def _run(*args: str | Path, **kwargs: object) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=120,
                          **kwargs)  # type: ignore[call-overload]
    assert done.returncode == 0, f"{args}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of what the distributions are built from (the worktree stays clean)."""
    src = tmp_path_factory.mktemp("src")
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(ROOT / name, src / name)
    return src


@pytest.fixture(scope="module")
def dist(sources: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """django-atf's sdist and wheel (`python -m build`)."""
    out = tmp_path_factory.mktemp("dist")
    _run(sys.executable, "-m", "build", "--no-isolation", "--outdir", out, sources)
    return out


@pytest.fixture(scope="module")
def client_wheel(sources: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """atf-client's wheel (`python -m build --wheel clients/python`)."""
    out = tmp_path_factory.mktemp("client-dist")
    _run(sys.executable, "-m", "build", "--no-isolation", "--wheel", "--outdir", out,
         sources / "clients" / "python")
    (wheel,) = out.glob("atf_client-*.whl")
    return wheel


def _wheel(dist: Path) -> Path:
    (wheel,) = dist.glob("django_atf-*.whl")
    return wheel


def _metadata(wheel: Path) -> list[str]:
    archive = zipfile.ZipFile(wheel)
    (name,) = [name for name in archive.namelist() if name.endswith(".dist-info/METADATA")]
    return archive.read(name).decode().splitlines()


def test_the_wheel_and_sdist_pass_twine_check_and_hold_only_the_apps(dist: Path) -> None:
    files = sorted(dist.iterdir())
    assert sorted(f.suffix for f in files) == [".gz", ".whl"]
    _run(sys.executable, "-m", "twine", "check", "--strict", *files)
    names = zipfile.ZipFile(_wheel(dist)).namelist()
    tops = {name.split("/")[0] for name in names}
    assert {top for top in tops if not top.endswith(".dist-info")} == {
        "tasks_core", "tasks_api", "tasks_console", "workers"}
    assert "tasks_console/templates/tasks_console/dashboard.html" in names
    assert "tasks_console/templates/admin/tasks_console/deadletter/change_list.html" in names
    assert "tasks_core/migrations/0001_initial.py" in names
    metadata = _metadata(_wheel(dist))
    assert "Requires-Dist: Django<6.2,>=5.2" in metadata
    assert {"Classifier: Framework :: Django :: 5.2", "Classifier: Framework :: Django :: 6.0",
            "Classifier: Framework :: Django :: 6.1"} <= set(metadata)
    assert any(line.startswith("Requires-Dist: atf-client") and "extra == \"client\"" in line
               for line in metadata)
    (entry_points,) = [name for name in names if name.endswith(".dist-info/entry_points.txt")]
    assert "atf = workers.pytest_plugin" in zipfile.ZipFile(_wheel(dist)).read(
        entry_points).decode()


def test_the_client_is_a_distribution_of_its_own_that_needs_only_requests(
        client_wheel: Path) -> None:
    _run(sys.executable, "-m", "twine", "check", "--strict", client_wheel)
    names = zipfile.ZipFile(client_wheel).namelist()
    assert {name.split("/")[0] for name in names if ".dist-info" not in name} == {"atf_client"}
    assert "atf_client/py.typed" in names
    assert [line for line in _metadata(client_wheel) if line.startswith("Requires-Dist")] == [
        "Requires-Dist: requests<3,>=2.28"]


def _venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv's python that sees this environment's pinned packages (see the module's
    docstring), Django among them: the project's Django."""
    venv = tmp_path_factory.mktemp("venv")
    _run(sys.executable, "-m", "venv", "--without-pip", "--clear", venv)
    python = venv / "bin" / "python"
    site = _run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    Path(site.stdout.strip(), "pinned-dependencies.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n")
    return python


def _pip(python: Path, *args: str | Path) -> subprocess.CompletedProcess:
    return _run(sys.executable, "-m", "pip", "--python", python, *args)


def test_installing_the_wheel_keeps_the_projects_django(
        dist: Path, client_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    # Given a project's environment with its Django (the one running this suite)
    python = _venv(tmp_path_factory)
    # When pip resolves the wheel with its postgres and client extras there, as the docs say
    # (`--find-links` where the atf-client wheel is)
    report = json.loads(_pip(python, "install", "--dry-run", "--no-index", "--quiet",
                             "--find-links", client_wheel.parent, "--report", "-",
                             f"{_wheel(dist)}[postgres,client]").stdout)
    # Then it installs django-atf and atf-client and nothing else: the project's Django stays
    assert sorted(item["metadata"]["name"] for item in report["install"]) == [
        "atf-client", "django-atf"]


@pytest.fixture(scope="module")
def shop_python(dist: Path, client_wheel: Path,
                tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv's python with both wheels installed, and pip's check that their
    dependency ranges hold."""
    python = _venv(tmp_path_factory)
    _pip(python, "install", "--no-deps", "--no-index", "--quiet", _wheel(dist), client_wheel)
    _pip(python, "check")
    return python


@pytest.fixture
def shop_env() -> Iterator[dict[str, str]]:
    """The shop's own PostgreSQL database (created, then dropped) and Redis prefix; nothing of
    this repository on the path."""
    db = settings.DATABASES["default"]
    name = f"{db['TEST']['NAME']}_shop"
    admin = dict(host=db["HOST"], port=db["PORT"], user=db["USER"], dbname=db["NAME"],
                 autocommit=True)
    with psycopg.connect(**admin) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    yield {
        "PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"),
        "PYTHONUNBUFFERED": "1", "REDIS_URL": settings.REDIS_URL,
        "SHOP_QUEUE_PREFIX": f"{atf_settings.queue_prefix}-shop", "SHOP_DB_NAME": name,
        "SHOP_DB_HOST": db["HOST"], "SHOP_DB_PORT": str(db["PORT"]), "SHOP_DB_USER": db["USER"],
    }
    with psycopg.connect(**admin) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


PLACE_ORDERS = """
    import json
    import django
    import tasks_core
    from django.test import Client
    from orders.models import Order
    from tasks_core.models import TaskEntity

    web = Client()
    placed = web.post("/orders/", {"email": "ann@example.com", "item": "mug", "quantity": 2},
                      content_type="application/json")
    refused = web.post("/orders/", {"email": "bob@example.com", "item": "mug", "quantity": 99},
                       content_type="application/json")
    print(json.dumps({
        "placed": placed.json(), "codes": [placed.status_code, refused.status_code],
        "api_without_token": web.get("/atf/api/v1/tasks/").status_code,
        "orders": list(Order.objects.values_list("email", flat=True)),
        "tasks": sorted(TaskEntity.objects.values_list("lambda_ref__name", flat=True)),
        "atf_from": tasks_core.__file__, "django": django.get_version(),
    }))
"""

#: After the worker ran them: the @task's result as the project reads it, and the console.
RESULT_AND_CONSOLE = """
    import json
    from django.contrib.auth.models import User
    from django.test import Client
    from orders.tasks import thank_customer

    result = thank_customer.get_result(RESULT_ID)
    admin = User.objects.create_superuser("admin", "admin@example.com", "pw")
    web = Client()
    web.force_login(admin)
    dashboard = web.get("/admin/atf/")
    lambdas = web.get("/admin/tasks_core/lambda/")
    print(json.dumps({
        "result_class": f"{type(result).__module__}.{type(result).__name__}",
        "status": str(result.status), "value": result.return_value,
        "worker_ids": len(result.worker_ids),
        "console": [dashboard.status_code, lambdas.status_code],
        "console_lists": "orders.thank_customer" in lambdas.content.decode(),
    }))
"""

#: A service that is not a Django project: atf_client (from the atf-client wheel) over HTTP.
CALL_THE_API = """
    import json, sys
    from importlib.metadata import distribution
    import atf_client
    from atf_client import Client

    with Client(sys.argv[1], sys.argv[2]) as atf:
        task = atf.schedule("orders.send_receipt", {"order_id": int(sys.argv[3])})
        print(json.dumps({"id": task.id, "lambda": atf.get(task.id).lambda_name,
                          "client_from": str(distribution("atf-client").locate_file(
                              "atf_client/__init__.py")) == atf_client.__file__}))
"""


def _shop_rows(env: dict[str, str], sql: str) -> list[tuple]:
    with psycopg.connect(host=env["SHOP_DB_HOST"], port=env["SHOP_DB_PORT"],
                         user=env["SHOP_DB_USER"], dbname=env["SHOP_DB_NAME"]) as conn:
        return conn.execute(sql).fetchall()


def test_the_example_shop_runs_on_the_installed_wheel(
        shop_python: Path, shop_env: dict[str, str], processes: Processes) -> None:
    def manage(*args: str) -> str:
        return _run(shop_python, "manage.py", *args, cwd=SHOP, env=shop_env).stdout

    def shell(code: str) -> dict:
        return json.loads(manage("shell", "-c", textwrap.dedent(code)).splitlines()[-1])

    # Given the shop's database migrated by the shop's manage.py
    manage("migrate", "--verbosity", "0")
    # When an order commits with its receipt task and its thank-you (a Django task), and one
    # over the stock rolls back with both
    order_run = shell(PLACE_ORDERS)
    # Then ATF came from the venv, on the project's own Django, and only the committed order
    # and its two tasks exist: the lambda's and the @task's own lambda's
    assert Path(order_run["atf_from"]).is_relative_to(shop_python.parent.parent)
    assert order_run["django"] == django.get_version()
    assert order_run["codes"] == [201, 409]
    assert order_run["orders"] == ["ann@example.com"]
    assert order_run["tasks"] == ["orders.send_receipt", "orders.thank_customer"]
    # and ATF's API keeps its own authentication though the shop's DRF default is AllowAny
    assert order_run["api_without_token"] == 401
    # When the shop runs a consumer, a worker for both lambdas and its web server
    processes.start("runconsumer", "--poll-interval", "0.2", python=str(shop_python),
                    manage=SHOP / "manage.py", env=shop_env)
    processes.start("runworker", "orders.send_receipt", "orders.thank_customer", "--threads",
                    "2", python=str(shop_python), manage=SHOP / "manage.py", env=shop_env)
    port = free_port()
    processes.start("runserver", f"127.0.0.1:{port}", "--noreload", python=str(shop_python),
                    manage=SHOP / "manage.py", env=shop_env)
    # Then the committed order's receipt is sent and it is thanked; the rolled-back one never
    # had a task
    wait_for(lambda: _shop_rows(shop_env, "SELECT status FROM tasks_core_taskentity")
             == [("success",)] * 2, timeout_s=60, message="both tasks to succeed")
    assert _shop_rows(shop_env, "SELECT email FROM orders_order "
                                "WHERE receipt_sent_at IS NOT NULL") == [("ann@example.com",)]
    # ...the @task's result is this Django's own TaskResult, and the console shows its lambda
    done = shell(RESULT_AND_CONSOLE.replace("RESULT_ID", repr(order_run["placed"]["thanks"])))
    framework = "django.tasks" if django.VERSION >= (6, 0) else "django_tasks"
    assert done == {"result_class": f"{framework}.base.TaskResult", "status": "SUCCESSFUL",
                    "value": {"order_id": order_run["placed"]["order"],
                              "thanked": "ann@example.com"},
                    "worker_ids": 1, "console": [200, 200], "console_lists": True}
    # When a service with a team token schedules a task through the API with atf_client
    token = manage("atf_token", "shop", "billing-service").splitlines()[-1].strip()
    url = f"http://127.0.0.1:{port}/atf/api/"
    wait_for(lambda: _answers(f"{url}v1/tasks/"), timeout_s=30, message="the shop's server")
    called = json.loads(_run(shop_python, "-c", textwrap.dedent(CALL_THE_API), url, token,
                             str(order_run["placed"]["order"]), env=shop_env,
                             cwd=shop_python.parent).stdout)  # not this repository's atf_client
    # Then the client came from the atf-client distribution, and the worker runs that task too
    assert called["lambda"] == "orders.send_receipt" and called["client_from"]
    wait_for(lambda: _shop_rows(shop_env, "SELECT status FROM tasks_core_taskentity WHERE id = "
                                f"{int(called['id'])}") == [("success",)],
             timeout_s=60, message="the API's task to succeed")


def _answers(url: str) -> bool:
    """Whether a server answers at `url` (any HTTP status)."""
    try:
        urllib.request.urlopen(url, timeout=2)  # noqa: S310 - a loopback URL of the test's
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False
    return True
