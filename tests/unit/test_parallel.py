"""What each xdist worker keeps to itself (tests/parallel.py, tests/ports.py), unit by unit; the
whole of it in a real parallel run is tests/integration/project/test_parallel_run.py."""

from __future__ import annotations

import socket

import pytest

from scripts import run_suite
from tests import parallel, ports


def test_outside_a_parallel_run_the_environment_is_left_as_it_is() -> None:
    environ = {"REDIS_URL": "redis://127.0.0.1:6379/15", "ATF_QUEUE_PREFIX": "atftest"}
    parallel.isolate_worker(environ)
    assert environ == {"REDIS_URL": "redis://127.0.0.1:6379/15", "ATF_QUEUE_PREFIX": "atftest"}


@pytest.mark.parametrize(("worker", "databases", "url", "prefix"), [
    ("gw0", None, "redis://127.0.0.1:6379/1", "atftest-gw0"),
    ("gw7", None, "redis://127.0.0.1:6379/8", "atftest-gw7"),
    ("gw1", "3,5-6", "redis://127.0.0.1:6379/5", "atftest-gw1"),
])
def test_each_worker_gets_its_redis_database_and_queue_prefix(
        worker: str, databases: str | None, url: str, prefix: str) -> None:
    environ = {"PYTEST_XDIST_WORKER": worker, "REDIS_URL": "redis://127.0.0.1:6379/15",
               "ATF_QUEUE_PREFIX": "atftest"}
    if databases is not None:
        environ["ATF_TEST_REDIS_DATABASES"] = databases
    parallel.isolate_worker(environ)
    assert (environ["REDIS_URL"], environ["ATF_QUEUE_PREFIX"]) == (url, prefix)
    # A process the worker starts reads the settings again, and keeps the worker's
    parallel.isolate_worker(environ)
    assert (environ["REDIS_URL"], environ["ATF_QUEUE_PREFIX"]) == (url, prefix)


def test_a_worker_past_the_listed_databases_stops_the_run_saying_why() -> None:
    environ = {"PYTEST_XDIST_WORKER": "gw2", "REDIS_URL": "redis://127.0.0.1:6379/15",
               "ATF_QUEUE_PREFIX": "atftest", "ATF_TEST_REDIS_DATABASES": "1-2"}
    with pytest.raises(SystemExit, match="worker gw2 has no Redis database of its own: "
                                         "ATF_TEST_REDIS_DATABASES names 2"):
        parallel.isolate_worker(environ)


@pytest.mark.parametrize(("text", "numbers"), [
    ("1-8", [1, 2, 3, 4, 5, 6, 7, 8]), ("1,3,5", [1, 3, 5]), ("1-2, 9", [1, 2, 9]), ("4", [4]),
])
def test_the_database_list_reads_numbers_and_ranges(text: str, numbers: list[int]) -> None:
    assert parallel.redis_databases(text) == numbers


@pytest.mark.parametrize("text", ["", "one", "1-", "1;2"])
def test_an_unreadable_database_list_is_refused_naming_it(text: str) -> None:
    with pytest.raises(ValueError, match="ATF_TEST_REDIS_DATABASES is "):
        parallel.redis_databases(text)


@pytest.mark.parametrize(("url", "expected"), [
    ("redis://127.0.0.1:6379/15", "redis://127.0.0.1:6379/3"),
    ("redis://:secret@redis.local:6380", "redis://:secret@redis.local:6380/3"),
    ("rediss://redis.local/0?ssl_cert_reqs=none", "rediss://redis.local/3?ssl_cert_reqs=none"),
    ("unix:///run/redis.sock?db=15", "unix:///run/redis.sock?db=3"),
])
def test_the_database_of_a_redis_url_is_replaced(url: str, expected: str) -> None:
    assert parallel.with_database(url, 3) == expected


def test_a_worker_takes_its_ports_from_its_own_block(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw2")
    picked = [ports.free_port() for _ in range(20)]
    assert all(22000 <= port < 23000 for port in picked)
    assert len(set(picked)) == 20  # in turn: never the same one twice running


def test_a_port_in_use_is_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    first = ports.FIRST + 3 * ports.SPAN
    last = ports.free_port()
    following, after_it = (first + (last - first + step) % ports.SPAN for step in (1, 2))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", following))
        taken.listen()
        assert ports.free_port() == after_it


@pytest.mark.parametrize(("cores", "workers"), [(1, 0), (2, 0), (7, 0), (8, 2), (16, 4),
                                                (64, 8)])
def test_the_default_workers_leave_each_about_four_cores(
        monkeypatch: pytest.MonkeyPatch, cores: int, workers: int) -> None:
    # A test keeps about two cores busy with what it starts: on a small machine, one process.
    monkeypatch.setattr(run_suite.os, "cpu_count", lambda: cores)
    assert run_suite.default_workers() == workers
