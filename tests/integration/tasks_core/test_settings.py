"""The ATF settings: defaults in tasks_core.conf, one way to read them, system checks with ids."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from django.core import checks
from django.test import override_settings
from pytest_django.fixtures import Settings

from tasks_core import conf, registry
from tasks_core.conf import atf_settings

ROOT = Path(__file__).resolve().parents[3]
APPS = ("tasks_core", "tasks_api", "tasks_console", "workers")


def _app_sources() -> list[Path]:
    return [path for app in APPS for path in (ROOT / app).rglob("*.py")]


def _atf_ids() -> list[str]:
    return [message.id for message in checks.run_checks(tags=["atf"])]


def test_every_atf_setting_has_a_type_a_default_and_a_meaning() -> None:
    conf_text = (ROOT / "tasks_core" / "conf.py").read_text()
    for name in conf.defaults():
        attribute = name.removeprefix("ATF_").lower()
        assert re.search(rf"#: [^\n]*\n(    #:[^\n]*\n)*    {attribute}: ", conf_text), \
            f"{name} has no #: line"


def test_the_apps_read_settings_through_the_typed_object() -> None:
    # Every `atf_settings.<name>` the apps read is a declared setting, and no app reads
    # `settings.ATF_*` any more
    read = {name for path in _app_sources()
            for name in re.findall(r"atf_settings\.([a-z0-9_]+)", path.read_text())}
    assert read, "the scan found no reads"
    declared = {name.removeprefix("ATF_").lower() for name in conf.defaults()}
    assert read <= declared, sorted(read - declared)
    old = [str(path) for path in _app_sources()
           if path.name != "conf.py" and re.search(r"settings\.ATF_", path.read_text())]
    assert old == []


def test_the_demo_the_benchmarks_and_the_tests_read_settings_through_it_too() -> None:
    # A read of a declared ATF setting as `settings.ATF_*` (not an assignment: tests change
    # settings that way) is found nowhere; HOST below reads them so on purpose, in a host
    # project that checks the defaults reach `settings`.
    declared = "|".join(conf.defaults())
    read = re.compile(rf"settings\.({declared})\b(?!\s*(=[^=]|,[^\n]*[^=!<>]=[^=]))")
    this = Path(__file__).resolve()
    found = [f"{path.relative_to(ROOT)}:{number}"
             for folder in ("demo", "bench", "tests") for path in (ROOT / folder).rglob("*.py")
             if path != this and path.parent.name != ".venv"
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if read.search(line)]
    assert found == []


def test_a_read_follows_the_projects_settings_at_that_moment(settings: Settings) -> None:
    assert atf_settings.max_batch_size == conf.AtfSettings.max_batch_size
    with override_settings(ATF_MAX_BATCH_SIZE=7):
        assert atf_settings.max_batch_size == 7
    # ...the same through pytest-django's `settings` fixture, which the tests use to change one
    settings.ATF_MAX_BATCH_SIZE = 9
    assert atf_settings.max_batch_size == 9


def test_an_unknown_atf_setting_is_named_with_the_closest_known_one() -> None:
    with override_settings(ATF_HEARTBEAT_INTERVAL=2, ATF_NOTHING_LIKE_IT=1):
        warnings = {m.msg: m.hint for m in checks.run_checks(tags=["atf"]) if m.id == "atf.W004"}
    assert warnings == {
        "ATF_HEARTBEAT_INTERVAL is not an ATF setting; it is ignored":
            "Did you mean ATF_HEARTBEAT_INTERVAL_S?",
        "ATF_NOTHING_LIKE_IT is not an ATF setting; it is ignored": "See the settings reference.",
    }


def test_the_settings_reference_lists_every_setting_and_check() -> None:
    reference = (ROOT / "docs" / "settings.md").read_text()
    missing = [name for name in conf.defaults() if f"| `{name}` |" not in reference]
    assert missing == []
    for path in ("tasks_core/checks.py", "workers/checks.py", "tasks_api/checks.py",
                 "atf_project/environment.py"):
        for check_id in set(re.findall(r'id="(atf\.[EW]\d{3})"', (ROOT / path).read_text())):
            assert f"| `{check_id}` |" in reference, check_id


def test_the_apps_never_read_the_environment() -> None:
    # Django's reloader marks its child process in the environment (runserver reads it so too):
    # a fact about the process, not a setting, and the one read allowed.
    offenders = [f"{path}: {line.strip()}" for path in _app_sources()
                 for line in path.read_text().splitlines()
                 if "os.environ" in line and "autoreload.DJANGO_AUTORELOAD_ENV" not in line]
    assert offenders == []


@pytest.mark.parametrize(("name", "text", "value"), [
    ("ATF_PRIORITIES", "a, b,,c", ["a", "b", "c"]),
    ("ATF_HEARTBEAT_INTERVAL_S", "2.5", 2.5),
    ("ATF_MAX_BATCH_SIZE", "7", 7),
    ("ATF_METRICS_PUBLIC", "on", True),
    ("ATF_METRICS_PUBLIC", "0", False),
    ("ATF_REDIS_URL", "", None),
    ("ATF_REDIS_URL", "redis://x:6379/1", "redis://x:6379/1"),
    ("ATF_TASK_TIMEOUT_S", "90", 90.0),
    ("ATF_TASK_TIMEOUT_S", "0", None),
    ("ATF_TASK_TIMEOUT_S", "none", None),
    ("ATF_TASK_TIMEOUT_S", "", None),
])
def test_the_environment_sets_each_atf_setting_as_its_type(name: str, text: str,
                                                           value: object) -> None:
    assert conf.from_environment({name: text, "OTHER": "x"}) == {name: value}


@pytest.mark.parametrize(("name", "text"), [
    ("ATF_METRICS_PUBLIC", "maybe"), ("ATF_METRICS_PUBLIC", "2"), ("ATF_MAX_BATCH_SIZE", "7.5"),
    ("ATF_HEARTBEAT_INTERVAL_S", "soon"), ("ATF_TASK_TIMEOUT_S", "an hour"),
])
def test_the_environment_refuses_a_text_its_setting_cannot_read_naming_it(name: str,
                                                                          text: str) -> None:
    with pytest.raises(conf.UnreadableSetting, match=rf"^{name} is '{text}'; it must be "):
        conf.from_environment({name: text})


def test_every_atf_variable_the_repository_reads_is_known_to_the_unknown_variable_check(
        ) -> None:
    # Misspelt on purpose, in the tests of the checks
    misspelt = {"ATF_HEARTBEAT_INTERVAL", "ATF_NOTHING_LIKE_IT", "ATF_WORKR_THREADS",
                "ATF_WORKER_THREAD"}
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    names = {name for file in files if file.endswith((".py", ".md", ".sh", ".yml", ".toml"))
             or Path(file).name in ("Makefile", "Dockerfile")
             for name in re.findall(r"\bATF_[A-Z0-9_]*[A-Z0-9]\b", (ROOT / file).read_text())}
    # The 16-core drain kit's own knobs, named in docs/benchmarks.md: its driver reads them
    kit_knobs = {"ATF_WORKERS", "ATF_THREADS", "ATF_CONFIGS"}
    assert conf.unknown_variables(names - misspelt - kit_knobs) == {}


def test_a_lambda_host_with_an_empty_database_url_starts() -> None:
    # Given a remote worker's host whose environment has DATABASE_URL set, but empty
    env = {**os.environ, "DATABASE_URL": "", "DJANGO_SECRET_KEY": "a-lambda-host-" * 4,
           "DJANGO_SETTINGS_MODULE": "atf_project.worker_settings"}
    # When its settings are loaded, Then they load, without a database
    code = "import django; django.setup(); from django.conf import settings; " \
           "print(settings.DATABASES['default']['ENGINE'])"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)
    assert (done.returncode, done.stdout.strip()) == (0, "django.db.backends.dummy"), done.stderr


def test_the_standalone_settings_check_clean() -> None:
    assert _atf_ids() == []


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"ATF_QUEUE_BACKEND": "carrier-pigeon"}, ["atf.E001"]),
        ({"ATF_REDIS_URL": None}, ["atf.E002"]),
        ({"ATF_REDIS_URL": "127.0.0.1:6379"}, ["atf.E002"]),
        ({"ATF_HEARTBEAT_TIMEOUT_S": 15.0}, ["atf.E003"]),
        ({"ATF_HEARTBEAT_INTERVAL_S": 10.0}, ["atf.E003"]),
        ({"ATF_PRIORITIES": []}, ["atf.E004"]),
        ({"ATF_PRIORITIES": ["high", "high", "default"]}, ["atf.E004"]),
        ({"ATF_DEFAULT_PRIORITY": "urgent"}, ["atf.E005"]),
        ({"ATF_MAX_ATTEMPTS": 0}, ["atf.E006"]),
        ({"ATF_RETENTION_S": -1}, ["atf.E006"]),
        ({"ATF_POLL_INTERVAL_S": "fast"}, ["atf.E006"]),
        ({"ATF_RETENTION_S": 0, "ATF_BACKOFF_BASE_S": 0}, []),
        ({"ATF_LOG_LEVEL": "LOUD"}, ["atf.E008"]),
        ({"ATF_LOG_LEVEL": "debug"}, []),
        ({"REST_FRAMEWORK": {"NON_FIELD_ERRORS_KEY": "errors"}}, ["atf.W003"]),
        ({"REST_FRAMEWORK": {"DATETIME_FORMAT": "%s", "URL_FORMAT_OVERRIDE": None}},
         ["atf.W003", "atf.W003"]),
        # DRF's own default, and a default ATF's views replace with their own
        ({"REST_FRAMEWORK": {"DATETIME_FORMAT": "iso-8601", "PAGE_SIZE": 3}}, []),
    ],
)
def test_check_reports_each_misconfiguration_with_its_id(
        settings: Settings, changes: dict[str, object], expected: list[str]) -> None:
    # Given one setting that cannot work (the last case: zeros that are allowed)
    for name, value in changes.items():
        setattr(settings, name, value)
    # When the system checks run, then exactly that error is reported
    assert _atf_ids() == expected


def test_check_reports_a_lambda_whose_heartbeat_timeout_a_worker_could_outlive() -> None:
    # Given a lambda registered with a heartbeat timeout of two intervals
    registry.register("tests.settings.short", heartbeat_timeout=10.0)(lambda ctx, payload: None)
    try:
        messages = checks.run_checks(tags=["atf"])
    finally:
        registry.unregister("tests.settings.short")
    # Then check names that lambda
    assert [m.id for m in messages] == ["atf.E003"]
    assert "lambda tests.settings.short" in messages[0].msg


HOST = """
    import django
    from django.conf import settings
    from django.core.management import call_command
    settings.configure(
        INSTALLED_APPS=["django.contrib.auth", "django.contrib.contenttypes", *THE_APPS],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
        ATF_REDIS_URL=THE_URL, ATF_PRIORITIES=["now", "later"],
        ATF_DEFAULT_PRIORITY="later",
    )
    django.setup()
    call_command("check", fail_level="WARNING")
    print(settings.ATF_PRIORITIES, settings.ATF_MAX_ATTEMPTS, settings.ATF_QUEUE_BACKEND)
"""


ALL_APPS = ["rest_framework", "drf_spectacular", "drf_spectacular_sidecar", "tasks_core",
            "tasks_api", "tasks_console", "workers"]


def _host(apps: list[str], redis_url: str | None) -> subprocess.CompletedProcess:
    code = (textwrap.dedent(HOST).replace("THE_APPS", repr(apps))
            .replace("THE_URL", repr(redis_url)))
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)


def test_a_host_that_sets_only_apps_databases_and_redis_gets_the_defaults() -> None:
    # Given a host project with nothing of ATF's but its apps, a Redis URL and two overrides
    # When Django starts and checks it
    done = _host(ALL_APPS, "redis://127.0.0.1:6379/0")
    # Then it checks clean, keeps what it set, and has every other default
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "['now', 'later'] 5 redis"


def test_a_host_without_a_redis_url_fails_check_with_atf_e002() -> None:
    done = _host(ALL_APPS, None)
    assert done.returncode != 0
    assert "(atf.E002) ATF_REDIS_URL is None" in done.stderr


def test_a_host_without_the_apps_the_api_needs_fails_check_with_atf_e007() -> None:
    done = _host(["tasks_core", "tasks_api"], "redis://127.0.0.1:6379/0")
    assert done.returncode != 0
    assert "(atf.E007) tasks_api needs 'rest_framework'" in done.stderr
    assert "(atf.W001) 'drf_spectacular' is not in INSTALLED_APPS" in done.stderr
    assert "(atf.W002) 'drf_spectacular_sidecar' is not in INSTALLED_APPS" in done.stderr
