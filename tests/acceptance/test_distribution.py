"""The django-atf distribution: built, checked, installed into a fresh virtualenv, and used by
the example shop (examples/shop) from there, not from this repository.

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
import zipfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from django.conf import settings

from tests.conftest import ROOT, Processes, wait_for

pytestmark = pytest.mark.slow

SHOP = ROOT / "examples" / "shop"
#: What the sdist is built from: the distribution's packages and the files pyproject.toml names.
SOURCES = ["pyproject.toml", "README.md", "CHANGELOG.md", "MANIFEST.in", "tasks_core",
           "tasks_api", "tasks_console", "workers", "atf_client"]


def _run(*args: str | Path, **kwargs: object) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=120,
                          **kwargs)  # type: ignore[call-overload]
    assert done.returncode == 0, f"{args}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist and the wheel, built from a copy of the sources (the worktree stays clean)."""
    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("dist")
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(ROOT / name, src / name)
    _run(sys.executable, "-m", "build", "--no-isolation", "--outdir", out, src)
    return out


def _wheel(dist: Path) -> Path:
    (wheel,) = dist.glob("django_atf-*.whl")
    return wheel


def test_the_wheel_and_sdist_pass_twine_check_and_hold_only_the_apps(dist: Path) -> None:
    files = sorted(dist.iterdir())
    assert [f.suffix for f in files] == [".gz", ".whl"]
    _run(sys.executable, "-m", "twine", "check", "--strict", *files)
    names = zipfile.ZipFile(_wheel(dist)).namelist()
    tops = {name.split("/")[0] for name in names}
    assert {top for top in tops if not top.endswith(".dist-info")} == {
        "tasks_core", "tasks_api", "tasks_console", "workers", "atf_client"}
    assert "tasks_console/templates/tasks_console/dashboard.html" in names
    assert "tasks_console/templates/admin/tasks_console/deadletter/change_list.html" in names
    assert "tasks_core/migrations/0001_initial.py" in names
    assert "atf_client/py.typed" in names


@pytest.fixture(scope="module")
def shop_python(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv's python with the wheel installed (see the module's docstring)."""
    venv = tmp_path_factory.mktemp("venv")
    _run(sys.executable, "-m", "venv", "--without-pip", "--clear", venv)
    python = venv / "bin" / "python"
    site = _run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    Path(site.stdout.strip(), "pinned-dependencies.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n")
    _run(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index",
         "--quiet", _wheel(dist))
    _run(sys.executable, "-m", "pip", "--python", python, "check")
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
        "SHOP_QUEUE_PREFIX": f"{settings.ATF_QUEUE_PREFIX}-shop", "SHOP_DB_NAME": name,
        "SHOP_DB_HOST": db["HOST"], "SHOP_DB_PORT": str(db["PORT"]), "SHOP_DB_USER": db["USER"],
    }
    with psycopg.connect(**admin) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


PLACE_ORDERS = """
    import json
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
        "tasks": list(TaskEntity.objects.values_list("payload", flat=True)),
        "atf_from": tasks_core.__file__,
    }))
"""


def _shop_rows(env: dict[str, str], sql: str) -> list[tuple]:
    with psycopg.connect(host=env["SHOP_DB_HOST"], port=env["SHOP_DB_PORT"],
                         user=env["SHOP_DB_USER"], dbname=env["SHOP_DB_NAME"]) as conn:
        return conn.execute(sql).fetchall()


def test_the_example_shop_runs_on_the_installed_wheel(
        shop_python: Path, shop_env: dict[str, str], processes: Processes) -> None:
    def manage(*args: str) -> str:
        return _run(shop_python, "manage.py", *args, cwd=SHOP, env=shop_env).stdout

    # Given the shop's database migrated by the shop's manage.py
    manage("migrate", "--verbosity", "0")
    # When an order commits with its receipt task, and one over the stock rolls back with its
    order_run = json.loads(manage("shell", "-c", textwrap.dedent(PLACE_ORDERS)).splitlines()[-1])
    # Then ATF came from the venv, and only the committed order and its task exist
    assert Path(order_run["atf_from"]).is_relative_to(shop_python.parent.parent)
    assert order_run["codes"] == [201, 409]
    assert order_run["orders"] == ["ann@example.com"]
    assert order_run["tasks"] == [{"order_id": order_run["placed"]["order"]}]
    # and ATF's API keeps its own authentication though the shop's DRF default is AllowAny
    assert order_run["api_without_token"] == 401
    # When the shop runs a consumer and a worker
    processes.start("runconsumer", "--poll-interval", "0.2", python=str(shop_python),
                    manage=SHOP / "manage.py", env=shop_env)
    processes.start("runworker", "orders.send_receipt", "--threads", "2",
                    python=str(shop_python), manage=SHOP / "manage.py", env=shop_env)
    # Then the committed order's receipt is sent, and the rolled-back one never had a task
    wait_for(lambda: _shop_rows(shop_env, "SELECT status FROM tasks_core_taskentity")
             == [("success",)], timeout_s=60, message="the receipt task to succeed")
    assert _shop_rows(shop_env, "SELECT email FROM orders_order "
                                "WHERE receipt_sent_at IS NOT NULL") == [("ann@example.com",)]
    assert _shop_rows(shop_env, "SELECT count(*) FROM tasks_core_taskentity") == [(1,)]
