"""The suite's check that a test leaves no database connection open besides its own
(`_no_other_connection_left_open` in tests/conftest.py): one that does fails, named, with
the thread that opened the connection, which is then closed; one whose thread closes its
connection passes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from tests.conftest import ROOT

#: Two tests, each querying from a thread of its own: one thread closes its connection.
THREAD_TESTS = '''
import threading

import pytest
from django.db import connection, connections

pytestmark = pytest.mark.django_db(transaction=True)


def query_in_a_thread(name, *, close):
    def query():
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        if close:
            connections.close_all()

    thread = threading.Thread(target=query, name=name)
    thread.start()
    thread.join()


def test_a_thread_that_closes_its_connection():
    query_in_a_thread("Tidy", close=True)


def test_a_thread_that_leaves_its_connection_open():
    query_in_a_thread("Leaky", close=False)
'''


@pytest.mark.skipif(connection.vendor != "postgresql", reason="a PostgreSQL test database")
def test_a_test_whose_thread_leaves_a_connection_open_fails_naming_it(
        tmp_path: Path, db: None) -> None:
    # Given a test module whose tests query from threads, run with the suite's fixtures
    (tmp_path / "test_threads.py").write_text(THREAD_TESTS)
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["tests.conftest"]\n')
    database = f"{connection.settings_dict['NAME']}_left_open"
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "PYTHONPATH": str(ROOT),
           "ATF_TEST_DATABASE_NAME": database}
    env.pop("PYTEST_XDIST_WORKER", None)  # a run of its own
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir",
         str(tmp_path), "-c", os.devnull, str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    # Then the test whose thread closed its connection passed; the other failed at its
    # teardown, naming the thread and the test it was opened in
    output = ran.stdout + ran.stderr
    assert ran.returncode == 1, output
    assert "2 passed, 1 error" in output, output
    assert ("database connections left open: default of thread Leaky (ended), opened in "
            "test_threads.py::test_a_thread_that_leaves_its_connection_open (call)") in output
    assert "Tidy" not in output
    # ...and closed: the run dropped its test database
    assert "Error when trying to teardown test databases" not in output, output
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_database WHERE datname = %s", [database])
        assert cursor.fetchone() == (0,)
