"""A deployment refuses insecure defaults: the secret key, HTTPS settings, console logins."""

from __future__ import annotations

import secrets
import subprocess
import sys

import pytest
import redis
from django.test import Client, override_settings
from django.urls import reverse

from tests.conftest import ROOT, subprocess_env
from tests.factories import UserFactory

LOGIN = reverse("admin:login")

#: The production configuration that the deployment page documents.
PRODUCTION = {
    "DJANGO_DEBUG": "0",
    "DJANGO_ALLOWED_HOSTS": "atf.example.com",
    "DJANGO_CSRF_TRUSTED_ORIGINS": "https://atf.example.com",
    "DJANGO_SECURE_COOKIES": "1",
    "DJANGO_SSL_REDIRECT": "1",
    "DJANGO_HSTS_SECONDS": "31536000",
    "DJANGO_HSTS_INCLUDE_SUBDOMAINS": "1",
    "DJANGO_HSTS_PRELOAD": "1",
    "DJANGO_SECURE_PROXY_SSL_HEADER": "X-Forwarded-Proto=https",
}


def manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """manage.py with the project's settings, no demo, and `env` on top."""
    child = {**subprocess_env(), **env}
    for name in ("ATF_DEMO", "DJANGO_SECRET_KEY", "DJANGO_DEBUG"):
        if name not in env:
            child.pop(name, None)
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=child,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.django_db
def test_check_deploy_is_clean_in_the_documented_production_configuration() -> None:
    result = manage("check", "--deploy", "--fail-level", "WARNING",
                    DJANGO_SECRET_KEY=secrets.token_urlsafe(50), **PRODUCTION)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


@pytest.mark.django_db
def test_without_the_https_switches_check_deploy_warns() -> None:
    result = manage("check", "--deploy", DJANGO_SECRET_KEY=secrets.token_urlsafe(50))
    for warning in ("W004", "W008", "W012", "W016"):
        assert warning in result.stderr + result.stdout


@pytest.mark.parametrize("command", [["check"], ["runconsumer"], ["migrate"]])
def test_without_a_secret_key_nothing_starts_unless_debug(command: list[str]) -> None:
    # When a command starts with DEBUG off and no DJANGO_SECRET_KEY
    result = manage(*command)
    # Then it stops at once with one line that says what to set
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "DJANGO_SECRET_KEY is not set: give it a long random value "
        "(or set DJANGO_DEBUG=1 for development)"]


@pytest.mark.django_db
def test_with_debug_on_the_development_key_is_used() -> None:
    assert manage("check", DJANGO_DEBUG="1").returncode == 0


def test_the_proxy_header_switch_is_parsed() -> None:
    result = manage("shell", "-c", "from django.conf import settings as s; "
                    "print(s.SECURE_PROXY_SSL_HEADER, s.SESSION_COOKIE_SECURE, "
                    "s.CSRF_COOKIE_SECURE, s.SECURE_HSTS_SECONDS)",
                    DJANGO_DEBUG="1", DJANGO_SECURE_PROXY_SSL_HEADER="X-Forwarded-Proto=https",
                    DJANGO_SECURE_COOKIES="1", DJANGO_HSTS_SECONDS="60")
    assert result.stdout.splitlines()[-1] == "('HTTP_X_FORWARDED_PROTO', 'https') True True 60"


@pytest.mark.django_db
@override_settings(ATF_LOGIN_MAX_FAILURES=3, ATF_LOGIN_LOCKOUT_S=60)
def test_console_logins_are_locked_out_after_repeated_failures(
        client: Client, redis_client: redis.Redis) -> None:
    # Given a staff user
    user = UserFactory(username="ops", is_staff=True, is_superuser=True)
    user.set_password("right-password")
    user.save()

    def login(password: str, address: str = "10.0.0.1") -> int:
        response = client.post(LOGIN, {"username": "ops", "password": password},
                                REMOTE_ADDR=address)
        return response.status_code  # 302: logged in; 200: the form again

    # When three wrong passwords are tried from one address
    assert [login("wrong") for _ in range(3)] == [200, 200, 200]
    # Then even the right password is refused from there, with a message
    response = client.post(LOGIN, {"username": "ops", "password": "right-password"},
                           REMOTE_ADDR="10.0.0.1")
    assert response.status_code == 200
    assert "Too many failed logins" in response.content.decode()
    # And another address still logs in
    assert login("right-password", address="10.0.0.2") == 302


@pytest.mark.django_db
@override_settings(ATF_LOGIN_MAX_FAILURES=3)
def test_a_successful_login_resets_the_count(client: Client, redis_client: redis.Redis) -> None:
    user = UserFactory(username="ops", is_staff=True, is_superuser=True)
    user.set_password("right-password")
    user.save()
    for password in ("wrong", "wrong", "right-password", "wrong", "wrong", "right-password"):
        client.logout()
        response = client.post(LOGIN, {"username": "ops", "password": password})
    assert response.status_code == 302


def _gunicorn_settings(**env: str) -> dict[str, str]:
    """The settings gunicorn reads from the API's config, as `--print-config` shows them."""
    shown = subprocess.run(
        [sys.executable, "-m", "gunicorn", "--print-config",
         "-c", "python:atf_project.gunicorn_conf", "atf_project.wsgi:application"],
        cwd=ROOT, env={**subprocess_env(), **env}, capture_output=True, text=True, timeout=60,
        check=True)
    pairs = (line.split("=", 1) for line in shown.stdout.splitlines() if "=" in line)
    return {name.strip(): value.strip() for name, value in pairs}


def test_the_api_gunicorn_opens_no_control_socket_shared_with_other_gunicorns() -> None:
    # gunicorn's default path is one per user: a second instance would take it over.
    assert _gunicorn_settings()["control_socket_disable"] == "True"
    asked = _gunicorn_settings(ATF_WEB_CONTROL_SOCKET="/run/atf-api/gunicorn.ctl")
    assert (asked["control_socket_disable"], asked["control_socket"]) == (
        "False", "/run/atf-api/gunicorn.ctl")


def test_a_server_process_has_its_urls_and_views_imported_before_its_first_request() -> None:
    # When a server process loads the project's WSGI application (gunicorn, the demo)
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, atf_project.wsgi; "
         "print(all(name in sys.modules for name in "
         "('atf_project.urls', 'tasks_api.urls', 'tasks_api.views')))"],
        cwd=ROOT, env=subprocess_env(ATF_DEMO="1"), capture_output=True, text=True,
        timeout=60)
    # Then the URLconf and the views it names are imported already, not by a first request
    assert loaded.stdout.strip() == "True", loaded.stdout + loaded.stderr


def test_a_worker_or_consumer_process_leaves_rest_frameworks_serializers_unloaded() -> None:
    # When a process sets Django up and loads the commands that run workers and consumers
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, django; django.setup(); "
         "from django.core.management import load_command_class; "
         "[load_command_class('workers', name) for name in ('runworker', 'runconsumer')]; "
         "print('rest_framework.serializers' in sys.modules)"],
        cwd=ROOT, env=subprocess_env(ATF_DEMO="1"), capture_output=True, text=True, timeout=60)
    # Then REST framework's serializers, which only the API and one console form use, are not
    # among its modules (they cost each such process ~140 ms to start and ~11 MB)
    assert loaded.stdout.strip() == "False", loaded.stdout + loaded.stderr
