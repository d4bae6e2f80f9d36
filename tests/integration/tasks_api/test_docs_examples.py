"""The REST API page's example errors are what the API answers: each documented request whose
answer the page shows as field errors (`{"field": ["message", …]}`) is sent, and the answer
compared with the page."""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.integration.tasks_api.test_api_support import member

pytestmark = pytest.mark.django_db

API_PAGE = ROOT / "docs" / "api.md"
CONSOLE_BLOCK = re.compile(r"^```console\n(.*?)^```", re.MULTILINE | re.DOTALL)


def documented_errors(page: str) -> list[tuple[str, str, Any, dict[str, list[str]]]]:
    """(method, path, body, answer) of each example whose shown answer is field errors."""
    examples = []
    for block in CONSOLE_BLOCK.findall(page):
        # A command is a `$ ` line and the lines it continues; its answer, the lines up to the
        # next command, wrapped by the page (a wrapped line starts with one space).
        for command, answer in re.findall(r"^\$ (.*?)\n(?=[^ ])(.*?)(?=^\$ |\Z)", block,
                                          re.MULTILINE | re.DOTALL):
            words = shlex.split(command.replace("\\\n", " "))
            try:
                shown = json.loads(answer.replace("\n", ""))
            except json.JSONDecodeError:
                continue
            if isinstance(shown, dict) and all(isinstance(v, list) for v in shown.values()):
                method = words[words.index("-X") + 1] if "-X" in words else "GET"
                path = next(w for w in words if w.startswith("localhost:"))
                examples.append((method, path.split("localhost:8000", 1)[1],
                                 json.loads(words[words.index("-d") + 1]), shown))
    return examples


EXAMPLES = documented_errors(API_PAGE.read_text())


def test_the_page_shows_field_errors_of_single_and_batch_requests() -> None:
    assert {path for _method, path, _body, _answer in EXAMPLES} >= {
        "/api/v1/tasks/", "/api/v1/tasks/batch/"}


@pytest.mark.parametrize(("method", "path", "body", "answer"), EXAMPLES,
                         ids=[f"{m} {p}" for m, p, _b, _a in EXAMPLES])
def test_a_documented_error_is_what_the_api_answers(method: str, path: str, body: Any,
                                                    answer: dict[str, list[str]]) -> None:
    demo = member("demo", lambda_name="demo.noop")
    response = demo.client.generic(method, path, json.dumps(body),
                                   content_type="application/json")
    assert (response.status_code, response.json()) == (400, answer)
