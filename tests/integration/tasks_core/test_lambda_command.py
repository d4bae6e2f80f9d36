"""`manage.py atf_lambda`: shows each option's value and source, sets and clears overrides."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from tasks_core import directory
from tasks_core.models import Lambda, LambdaOverride
from tests.conftest import ROOT, subprocess_env
from tests.factories import LambdaFactory

pytestmark = [pytest.mark.django_db]


@pytest.fixture
def mailer() -> Lambda:
    return LambdaFactory(name="tests.mailer", max_attempts=3, quota_per_s=None)


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("atf_lambda", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def line(out: str, option: str) -> list[str]:
    return next(row.split() for row in out.splitlines() if row.startswith(option + " "))


def test_without_options_it_shows_each_value_and_where_it_comes_from(mailer: Lambda) -> None:
    out = run("tests.mailer")
    assert line(out, "max_attempts") == ["max_attempts", "3", "code", "3"]
    assert line(out, "quota") == ["quota", "none", "code", "none"]
    assert not LambdaOverride.objects.exists()


def test_options_set_overrides_that_the_workers_read(mailer: Lambda) -> None:
    out = run("tests.mailer", "--quota", "20", "--max-attempts", "9")
    assert line(out, "quota")[:4] == ["quota", "20", "operator", "none"]
    assert line(out, "max_attempts")[:5] == ["max_attempts", "9", "operator", "3", "atf_lambda"]
    directory.clear()
    assert (directory.by_name("tests.mailer").quota_per_s,
            directory.by_name("tests.mailer").max_attempts) == (20.0, 9)


def test_timeout_overrides_the_codes_time_limit(mailer: Lambda) -> None:
    out = run("tests.mailer", "--timeout", "90")
    assert line(out, "timeout")[:4] == ["timeout", "90", "operator", "none"]
    directory.clear()
    assert directory.by_name("tests.mailer").timeout_s == 90.0


def test_code_clears_one_override_and_reset_clears_all(mailer: Lambda) -> None:
    run("tests.mailer", "--quota", "20", "--max-attempts", "9", "--backoff-cap", "60")
    out = run("tests.mailer", "--quota", "code")
    assert line(out, "quota")[:3] == ["quota", "none", "code"]
    assert line(out, "max_attempts")[:3] == ["max_attempts", "9", "operator"]
    out = run("tests.mailer", "--reset")
    assert {line(out, name)[2] for name in ("max_attempts", "backoff_cap")} == {"code"}
    assert not LambdaOverride.objects.exists()


@pytest.mark.parametrize(("args", "message"), [
    (("--quota", "0"), "--quota 0: Give a number above 0"),
    (("--max-attempts", "two"), "--max-attempts two: Give a number"),
    (("--max-attempts", "1.5"), "--max-attempts 1.5: Give a whole number"),
    (("--heartbeat-timeout", "3"), "--heartbeat-timeout 3: Give more than 15"),
    (("--timeout", "-1"), "--timeout -1: Give 0 or more"),
])
def test_a_bad_value_is_a_clear_error_and_changes_nothing(mailer: Lambda, args: tuple[str, ...],
                                                          message: str) -> None:
    with pytest.raises(CommandError, match=message):
        run("tests.mailer", "--backoff-cap", "60", *args)
    assert not LambdaOverride.objects.exists()


def test_an_unknown_lambda_is_a_clear_error() -> None:
    with pytest.raises(CommandError, match="unknown lambda 'tests.nope'"):
        run("tests.nope")


@pytest.mark.django_db(transaction=True)
def test_from_a_shell_a_bad_value_exits_non_zero_with_one_line(mailer: Lambda) -> None:
    done = subprocess.run([sys.executable, str(ROOT / "manage.py"), "atf_lambda", "tests.mailer",
                           "--quota", "-5"], cwd=ROOT, env=subprocess_env(),
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "CommandError: --quota -5: Give a number above 0 and at most 1e+06."]
