"""DATABASE_URL with several hosts (a primary and its standbys) and its options."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from atf_project import database_url
from tests.conftest import ROOT

FAILOVER_URL = ("postgres://atf:s%40cret@db-a:5433,db-b,[::1]:6000/atf"
                "?target_session_attrs=read-write&sslmode=require")


def test_several_hosts_become_comma_separated_hosts_and_ports_with_the_options() -> None:
    config = database_url.parse(FAILOVER_URL, conn_max_age=60)
    assert {key: config[key] for key in ("ENGINE", "USER", "PASSWORD", "HOST", "PORT", "NAME",
                                         "OPTIONS", "CONN_MAX_AGE")} == {
        "ENGINE": "django.db.backends.postgresql", "USER": "atf", "PASSWORD": "s@cret",
        "HOST": "db-a,db-b,::1", "PORT": "5433,5432,6000", "NAME": "atf",
        "OPTIONS": {"target_session_attrs": "read-write", "sslmode": "require"},
        "CONN_MAX_AGE": 60,
    }


def test_one_host_is_dj_database_urls_reading() -> None:
    config = database_url.parse("postgres://postgres@127.0.0.1:5432/test")
    assert (config["HOST"], config["PORT"], config["NAME"]) == ("127.0.0.1", 5432, "test")


def test_compose_gives_back_a_url_that_parses_to_the_same_connection() -> None:
    config = database_url.parse(FAILOVER_URL)
    again = database_url.parse(database_url.compose(config))
    for key in ("USER", "PASSWORD", "HOST", "PORT", "NAME", "OPTIONS"):
        assert again[key] == config[key], key


def test_an_unreadable_host_is_named() -> None:
    with pytest.raises(ValueError, match=r"cannot read host ':5' of 'db-a,:5'"):
        database_url.parse("postgres://postgres@db-a,:5/atf")


def test_a_list_of_urls_splits_between_urls_not_between_one_urls_hosts() -> None:
    # (ATF_SHARD_URLS: each shard a primary and its standby)
    assert database_url.split_list(f"postgres://a/atf, {FAILOVER_URL},postgres://c,d:7/x") == [
        "postgres://a/atf", FAILOVER_URL, "postgres://c,d:7/x"]
    assert database_url.split_list(" ") == []


def test_the_settings_pass_the_hosts_and_the_options_to_the_connection() -> None:
    code = ("from django.conf import settings; from django.db import connection; "
            "params = connection.get_connection_params(); "
            "print(params['host'], params['port'], params['target_session_attrs'], "
            "params['connect_timeout'])")
    done = subprocess.run(
        [sys.executable, "-c", f"import django; django.setup(); {code}"], cwd=ROOT,
        env=_settings_env("postgres://postgres@127.0.0.1:5433,127.0.0.1:5434/atf"
                          "?target_session_attrs=read-write"),
        capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["127.0.0.1,127.0.0.1", "5433,5434", "read-write", "5"], (
        done.stderr)


def test_shard_urls_of_several_hosts_make_one_shard_each() -> None:
    code = ("from django.conf import settings as s; "
            "print(*s.ATF_STORE_SHARDS, s.DATABASES['shard1']['HOST'], "
            "s.DATABASES['shard1']['PORT'])")
    done = subprocess.run(
        [sys.executable, "-c", f"import django; django.setup(); {code}"], cwd=ROOT,
        env={**_settings_env("postgres://postgres@127.0.0.1:5432/control"),
             "ATF_SHARD_URLS": "postgres://postgres@127.0.0.1:5433/atf,"
                               "postgres://postgres@127.0.0.1:5434,127.0.0.1:5435/atf"
                               "?target_session_attrs=read-write"},
        capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["shard0", "shard1", "127.0.0.1,127.0.0.1", "5434,5435"], (
        done.stderr)


def test_a_bad_url_stops_a_command_in_one_line() -> None:
    done = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT,
                          env=_settings_env("postgres://postgres@db-a,:5/atf"),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert done.stderr.strip() == (
        "DATABASE_URL: cannot read host ':5' of 'db-a,:5' (expected host[:port],host[:port],...)")


def _settings_env(url: str) -> dict[str, str]:
    return {**os.environ, "DJANGO_SETTINGS_MODULE": "atf_project.settings", "ATF_DEMO": "1",
            "DATABASE_URL": url}
