"""The suite run by several pytest processes at once (pytest-xdist, `pytest -n N`).

Each xdist worker process (`gw0`, `gw1`, ...) keeps to itself:

- its test database: pytest-django adds the worker's name to it (`test_atf_gw0`);
- its Redis database: the worker's entry of ATF_TEST_REDIS_DATABASES (`1-8` unless set; gw0
  takes the first), in place of REDIS_URL's, since the tests flush their database;
- its queue prefix: ATF_QUEUE_PREFIX with the worker's name after it (`atftest-gw0`), since a
  Redis channel (the consumer's wake-ups) is seen from every database of the server;
- its ports (tests/ports.py).

`isolate_worker` applies the first three to the environment before the settings are read
(tests/settings.py), so the manage.py children a test starts get them too. A plain `pytest`
(no xdist) keeps REDIS_URL's database (15 by default) and the prefix as they are.

Loaded as a plugin (`-p tests.parallel` in pytest.ini), it also splits a run in two phases:
`--phase=parallel` leaves out the tests marked `serial` (those that cannot share the machine
with other tests: timing ratios, whole-machine checks), `--phase=serial` runs only those.
`make test` runs the first with xdist, then the second alone.
"""

from __future__ import annotations

import os
import re
from collections.abc import MutableMapping
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pytest

#: The Redis databases the workers take, in order, unless ATF_TEST_REDIS_DATABASES says.
#: Not 15: a run without xdist uses that one (tests/settings.py).
WORKER_REDIS_DATABASES = "1-8"


def worker_number(environ: MutableMapping[str, str] = os.environ) -> int | None:
    """This process's xdist worker number (3 for `gw3`), None outside a parallel run.

    xdist sets PYTEST_XDIST_WORKER in each worker before pytest reads any settings; the
    processes a worker starts inherit it."""
    match = re.fullmatch(r"gw(\d+)", environ.get("PYTEST_XDIST_WORKER", ""))
    return int(match.group(1)) if match else None


def redis_databases(text: str) -> list[int]:
    """`1-8`, `1,3,5` or `1-4,9` as the list of database numbers it names, in order."""
    numbers: list[int] = []
    for part in text.replace(" ", "").split(","):
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if match is None:
            raise ValueError(f"ATF_TEST_REDIS_DATABASES is {text!r}; it must list database "
                             "numbers and ranges, as in 1-8 or 1,3,5")
        first, last = int(match.group(1)), int(match.group(2) or match.group(1))
        numbers.extend(range(first, last + 1))
    return numbers


def with_database(url: str, database: int) -> str:
    """A Redis URL with its database number replaced (the path; `?db=` for a unix socket)."""
    parts = urlsplit(url)
    if parts.scheme == "unix":  # (urlunsplit would drop the empty host's `//`)
        query = dict(parse_qsl(parts.query)) | {"db": str(database)}
        return f"{url.partition('?')[0]}?{urlencode(query)}"
    return urlunsplit(parts._replace(path=f"/{database}"))


def isolate_worker(environ: MutableMapping[str, str] = os.environ) -> None:
    """In an xdist worker, its own Redis database and queue prefix in `environ` (see the
    module's docstring); nothing outside one. Applying it again changes nothing, so a process
    that a worker starts and that reads these settings again keeps the worker's."""
    number = worker_number(environ)
    if number is None:
        return
    databases = redis_databases(environ.get("ATF_TEST_REDIS_DATABASES", WORKER_REDIS_DATABASES))
    if number >= len(databases):
        raise SystemExit(
            f"pytest-xdist worker gw{number} has no Redis database of its own: "
            f"ATF_TEST_REDIS_DATABASES names {len(databases)}; run fewer workers "
            "(TEST_WORKERS, pytest -n) or name more databases")
    environ["REDIS_URL"] = with_database(environ["REDIS_URL"], databases[number])
    suffix = f"-gw{number}"
    environ["ATF_QUEUE_PREFIX"] = environ["ATF_QUEUE_PREFIX"].removesuffix(suffix) + suffix


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--phase", choices=("parallel", "serial"), default=None,
        help="parallel: every test but those marked serial (run them with xdist); serial: "
             "only those (run them alone, after). Every test when not given.")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    phase = config.getoption("phase")
    if phase is None:
        return
    kept: list[pytest.Item] = []
    left_out: list[pytest.Item] = []
    for item in items:
        serial = item.get_closest_marker("serial") is not None
        (kept if serial == (phase == "serial") else left_out).append(item)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept
