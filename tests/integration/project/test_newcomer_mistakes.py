"""A team's first week: the mistakes a newcomer makes in settings, environment and lambda
definitions, each answered by every command in one line that names what is wrong (never a
traceback); warnings warn, and only errors stop a process."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import ROOT, Processes, subprocess_env, wait_for

pytestmark = [pytest.mark.django_db]

def manage(*args: str, env: dict[str, str] | None = None,
           settings_lines: str | None = None, tmp_path: Path | None = None
           ) -> subprocess.CompletedProcess[str]:
    """`manage.py *args` on the test run's database and Redis; with `settings_lines`, on the
    standalone settings plus those lines (a module written to `tmp_path`)."""
    child_env = {**subprocess_env(), "DJANGO_DEBUG": "1", **(env or {})}
    if settings_lines is not None:
        assert tmp_path is not None
        child_env.update(project_settings(tmp_path, settings_lines))
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=child_env,
                          capture_output=True, text=True, timeout=120)


def project_settings(tmp_path: Path, lines: str) -> dict[str, str]:
    """Environment for a child on a settings module of the standalone settings plus `lines`."""
    (tmp_path / "team_settings.py").write_text(
        "from atf_project.settings import *  # noqa\n" + textwrap.dedent(lines))
    return {"DJANGO_SETTINGS_MODULE": "team_settings", "PYTHONPATH": f"{tmp_path}:{ROOT}"}


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    """The command's only line of output, which must not be a traceback."""
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert len(lines) == 1, done.stdout + done.stderr
    return lines[0]


# --- A warning warns; only an error stops a process -----------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("silenced", [False, True])
def test_a_consumer_starts_despite_a_misspelt_setting_which_it_warns_of_once_unless_silenced(
        processes: Processes, tmp_path: Path, silenced: bool) -> None:
    # Given a misspelt setting (atf.W004, a warning), perhaps silenced
    env = {**subprocess_env(), **project_settings(tmp_path, f"""
        ATF_WORKR_THREADS = 4
        SILENCED_SYSTEM_CHECKS = {["atf.W004"] if silenced else []!r}
    """)}
    # When the consumer starts, Then it runs
    consumer = processes.start("runconsumer", env=env)
    log = Path(consumer.log_path)  # type: ignore[attr-defined]
    wait_for(lambda: "consumer started" in log.read_text() or consumer.poll() is not None,
             message="the consumer started")
    assert consumer.poll() is None, log.read_text()
    # ...and it said so once, or not at all when silenced
    assert log.read_text().count("ATF_WORKR_THREADS") == (0 if silenced else 1), log.read_text()


# --- The environment ---------------------------------------------------------------------


@pytest.mark.parametrize(("command", "variable", "text", "expected"), [
    ("runworker", "ATF_WORKER_THREADS", "eight", "it must be a whole number"),
    ("check", "ATF_HEARTBEAT_INTERVAL_S", "soon", "it must be a number"),
    ("runconsumer", "ATF_METRICS_PUBLIC", "maybe", "it must be yes or no"),
    ("check", "ATF_DB_POOL_SIZE", "some", "it must be a whole number"),
    ("migrate", "ATF_DEMO", "please", "it must be yes or no"),
])
def test_a_variable_that_cannot_be_read_stops_every_command_in_one_line_naming_it(
        command: str, variable: str, text: str, expected: str) -> None:
    done = manage(command, env={variable: text})
    assert done.returncode == 1
    assert one_line(done) == f"environment variable {variable} is {text!r}; {expected}" + (
        " (1, true, yes, on or 0, false, no, off)" if "yes or no" in expected else "")


@pytest.mark.parametrize(("module", "variable"), [
    ("atf_project.settings", "ATF_WORKER_THREADS"),
    ("atf_project.gunicorn_conf", "ATF_WEB_THREADS"),
])
def test_the_standalone_service_refuses_an_unreadable_variable_on_import_too(
        module: str, variable: str) -> None:
    env = {**subprocess_env(), variable: "eight"}
    done = subprocess.run([sys.executable, "-c", f"import {module}"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert one_line(done) == (f"environment variable {variable} is 'eight'; it must be "
                              "a whole number")


def test_a_setting_that_is_no_number_is_named_not_an_option_nobody_passed(
        tmp_path: Path) -> None:
    done = manage("runworker", settings_lines='ATF_WORKER_THREADS = "eight"', tmp_path=tmp_path)
    assert done.returncode == 1
    assert "--threads" not in done.stderr
    assert one_line(done) == ("CommandError: atf.E006: ATF_WORKER_THREADS is 'eight'; it must "
                              "be a number over 0")


def test_a_misspelt_variable_is_warned_of_with_the_closest_name() -> None:
    done = manage("check", env={"ATF_WORKER_THREAD": "8"})
    assert done.returncode == 0, done.stderr
    assert ("(atf.W005) environment variable ATF_WORKER_THREAD is not an ATF setting; it is "
            "ignored\n\tHINT: Did you mean ATF_WORKER_THREADS?") in done.stderr


# --- A lambda defined with a bad name or options -----------------------------------------


def team_app(tmp_path: Path, lambdas_source: str) -> dict[str, str]:
    """Environment for a child whose project has an app of the team's with this lambdas.py."""
    app = tmp_path / "team_app"
    app.mkdir()
    (app / "__init__.py").write_text("")
    (app / "lambdas.py").write_text(textwrap.dedent(lambdas_source))
    return project_settings(tmp_path, 'INSTALLED_APPS = [*INSTALLED_APPS, "team_app"]')


REGISTER = "from tasks_core import atf\n"
TASK = "from tasks_core.contrib.tasks_compat import task\n"


@pytest.mark.parametrize(("command", "source", "message"), [
    ("check", REGISTER + 'atf.register("shop.pay", quota=-1)(lambda ctx, payload: None)',
     "lambda 'shop.pay': quota must be a number above 0"),
    ("runworker", REGISTER + 'atf.register("shop.pay", retries=3)(lambda ctx, payload: None)',
     "lambda 'shop.pay': unknown option(s) retries; the options are quota, max_attempts, "
     "heartbeat_timeout, backoff_base, backoff_cap, concurrency, rate, key_concurrency, "
     "key_rate, timeout"),
    ("migrate", TASK + "@task(quota=3)\ndef send(): pass",
     "team_app.lambdas.send: quota needs the task to run as a lambda of its own: give "
     "lambda_name too"),
    ("shell", TASK + "@task(retries=3)\ndef send(): pass",
     "team_app.lambdas.send: @task got unknown option(s) retries; the ATF backend takes "
     "max_attempts, timeout, collection, lambda_name, team, quota, heartbeat_timeout, "
     "backoff_base, backoff_cap, concurrency, rate, key_concurrency, key_rate (and "
     "idempotency_key through using())"),
    ("check", TASK + '@task(lambda_name="shop.send", backoff_cap=-1)\ndef send(): pass',
     "team_app.lambdas.send: backoff_cap must be a number above 0"),
    ("migrate", REGISTER + f'atf.register("shop.{"x" * 200}")(lambda ctx, payload: None)',
     f"'shop.{'x' * 55}'… is not a lambda name: use 1 to 200 ASCII letters, digits and "
     "_ - . :."),
    ("runworker", TASK + '@task(lambda_name="shop/send now!")\ndef send(): pass',
     "team_app.lambdas.send: lambda_name: 'shop/send now!' is not a lambda name: use 1 to 200 "
     "ASCII letters, digits and _ - . :."),
], ids=["register-bad-value", "register-unknown-option", "task-lambda-option-alone",
        "task-unknown-option", "task-bad-value", "register-long-name", "task-bad-name"])
def test_a_lambda_with_a_bad_name_or_options_stops_every_command_in_one_line(
        tmp_path: Path, command: str, source: str, message: str) -> None:
    done = manage(command, env=team_app(tmp_path, source))
    assert done.returncode == 1
    assert one_line(done) == f"cannot load the lambdas: {message}"


def test_any_other_error_in_a_lambdas_module_keeps_its_traceback(tmp_path: Path) -> None:
    done = manage("check", env=team_app(tmp_path, "import a_module_nobody_wrote\n"))
    assert done.returncode == 1
    assert "Traceback" in done.stderr
    assert "No module named 'a_module_nobody_wrote'" in done.stderr
