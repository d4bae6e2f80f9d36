"""`runworker --api`: what stops a remote worker at start, in one line (no server needed)."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from tests.ports import free_port


@pytest.mark.parametrize(("args", "message"), [
    (["--api", "ftp://atf.example.com", "--token", "t"], r"give the API's base URL"),
    (["--api", "atf.example.com", "--token", "t"], r"give the API's base URL"),
    (["--api", "http://127.0.0.1:9"], r"needs a worker token: --token or ATF_API_TOKEN"),
])
def test_a_bad_api_url_or_a_missing_token_stops_it(args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        call_command("runworker", "demo.noop", *args)


def test_an_unreachable_api_stops_it_with_the_reason() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(CommandError, match=r"cannot reach the ATF API at http://127\.0\.0\.1"):
        call_command("runworker", "demo.noop", "--api", url, "--token", "t")
