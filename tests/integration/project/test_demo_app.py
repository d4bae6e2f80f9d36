"""The demo app is installed only with ATF_DEMO=1, and demo.record writes only to `demo:` keys
and sleeps `retry_seconds`, when given, after its first attempt."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest
import redis

from demo.lambdas import record
from tasks_core import atf
from tasks_core.context import TaskContext
from tests.conftest import ROOT, subprocess_env

CTX = TaskContext(task_id=1, attempt=1, collection="default", priority="default",
                  lambda_name="demo.record")


def manage(*args: str, demo: str | None) -> subprocess.CompletedProcess[str]:
    """Run manage.py with ATF_DEMO set to `demo` (None: unset)."""
    env = {**subprocess_env(), "DJANGO_DEBUG": "1"}  # no secret key needed
    env.pop("ATF_DEMO", None)
    if demo is not None:
        env["ATF_DEMO"] = demo
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.django_db
@pytest.mark.parametrize(("demo", "installed"), [(None, False), ("0", False), ("1", True)])
def test_the_demo_app_is_installed_only_when_asked(demo: str | None, installed: bool) -> None:
    result = manage("shell", "-c", "from django.apps import apps; "
                    "from tasks_core import registry; "
                    "print(apps.is_installed('demo'), 'demo.fail' in registry.names())", demo=demo)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1].split() == [str(installed), str(installed)]


def test_make_demo_and_the_benchmarks_set_atf_demo() -> None:
    makefile = (ROOT / "Makefile").read_text()
    # ensure_services.py runs the demo as its command, which inherits its environment
    assert ("ATF_DEMO=1 $(PYTHON) scripts/ensure_services.py $(DEMO_SERVICES) -- \\\n"
            "\t  $(PYTHON) manage.py atf_demo") in makefile
    assert '"ATF_DEMO": "1"' in (ROOT / "bench" / "drivers" / "atf.py").read_text()
    assert os.environ["ATF_DEMO"] == "1"  # the test settings


@pytest.mark.parametrize("key", ["records", "atf:queue:demo.noop:high", "", "demo", 7,
                                 "demo:" + "x" * 300])
def test_demo_record_refuses_keys_outside_its_prefix(redis_client: redis.Redis,
                                                      key: object) -> None:
    with pytest.raises(atf.Fatal, match="demo:"):
        record(CTX, {"key": key})
    with pytest.raises(atf.Fatal, match="'started_key' must be a string that starts with 'demo:'"):
        record(CTX, {"key": "demo:records", "started_key": key})
    assert redis_client.keys("*") == []


def test_demo_record_appends_to_a_demo_key(redis_client: redis.Redis) -> None:
    assert record(CTX, {"key": "demo:records"}) == {"recorded": "demo:records"}
    (line,) = redis_client.lrange("demo:records", 0, -1)
    assert json.loads(line)["task_id"] == 1


def test_demo_record_says_when_it_starts_if_asked(redis_client: redis.Redis) -> None:
    record(CTX, {"key": "demo:records", "started_key": "demo:started"})
    (started,) = redis_client.lrange("demo:started", 0, -1)
    (line,) = redis_client.lrange("demo:records", 0, -1)
    assert json.loads(started) == {"task_id": 1, "attempt": 1, "start": json.loads(line)["start"]}


def test_demo_record_sleeps_retry_seconds_after_its_first_attempt(
        redis_client: redis.Redis) -> None:
    # (a test's long first attempt, cut short by a fault, is not waited out again)
    payload = {"key": "demo:records", "seconds": 0.5, "retry_seconds": 0}
    for attempt in (1, 2):
        record(dataclasses.replace(CTX, attempt=attempt), payload)
    first, second = (json.loads(line) for line in redis_client.lrange("demo:records", 0, -1))
    assert first["end"] - first["start"] >= 0.5
    assert second["end"] - second["start"] < 0.5
    # ...and without it every attempt sleeps `seconds`
    record(dataclasses.replace(CTX, attempt=2), {"key": "demo:plain", "seconds": 0.5})
    (plain,) = (json.loads(line) for line in redis_client.lrange("demo:plain", 0, -1))
    assert plain["end"] - plain["start"] >= 0.5
