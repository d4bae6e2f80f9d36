"""The runtime (requirements.txt, what `make demo` installs) holds no test, lint or docs tool;
requirements-dev.txt (make test, lint, docs, test-matrix) adds them on top of it."""

from __future__ import annotations

import re

from scripts import test_matrix
from tests.conftest import ROOT

TOOLS = ("pytest", "pytest-django", "pytest-xdist", "ruff", "mypy", "mkdocs", "playwright",
         "schemathesis")


def pins(name: str) -> dict[str, str]:
    lines = (ROOT / name).read_text().splitlines()
    found = (re.match(r"([A-Za-z0-9_.-]+)(?:\[[^]]*])?==(\S+)", line) for line in lines)
    return {match[1].lower(): match[2] for match in found if match}


def test_the_runtime_holds_no_tool_and_the_dev_set_includes_it() -> None:
    runtime, dev = pins("requirements.txt"), pins("requirements-dev.txt")
    assert not set(TOOLS) & set(runtime)
    assert set(TOOLS) <= set(dev) and not set(runtime) & set(dev)
    assert "-r requirements.txt" in (ROOT / "requirements-dev.txt").read_text().splitlines()
    assert {"django", "gunicorn", "psycopg", "redis"} <= set(runtime)


def test_each_matrix_venv_gets_the_runtime_and_the_tools_with_its_own_django() -> None:
    wanted = test_matrix.requirements(test_matrix.Combination.parse("py3.13-dj6.1"))
    lines = wanted.splitlines()
    assert "gunicorn==" + pins("requirements.txt")["gunicorn"] in lines
    assert "pytest==" + pins("requirements-dev.txt")["pytest"] in lines
    assert not any(line.startswith("-r ") or line.startswith("Django==5") for line in lines)
    assert test_matrix.Combination.parse("py3.13-dj6.1").django_spec in lines
