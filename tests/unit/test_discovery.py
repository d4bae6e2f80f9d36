"""Lambda discovery under `runworker --reload`: which processes set broken code aside, and the
one line that says where it broke."""

from __future__ import annotations

import pytest

from tasks_core import discovery


@pytest.mark.parametrize(("argv", "reloading"), [
    (["manage.py", "runworker", "orders.send", "--reload"], True),
    (["/venv/django/__main__.py", "runworker", "--reload", "--threads", "2"], True),
    (["manage.py", "runworker", "orders.send"], False),
    (["manage.py", "runserver"], False),
    (["manage.py", "shell", "-c", "runworker --reload"], False),
])
def test_only_runworker_with_reload_sets_broken_lambdas_aside(argv: list[str],
                                                              reloading: bool) -> None:
    assert discovery.reloading_worker(argv) is reloading


def test_a_syntax_error_is_said_with_its_file_and_line() -> None:
    with pytest.raises(SyntaxError) as raised:
        compile("x = 1\ndef broken(:\n", "/src/orders/lambdas.py", "exec")
    assert discovery.one_line(raised.value) == \
        "/src/orders/lambdas.py:2: SyntaxError: invalid syntax"


def test_another_error_is_said_where_it_was_raised() -> None:
    try:
        exec(compile("x = 1\nundefined_name\n", "/src/orders/lambdas.py", "exec"))  # noqa: S102
    except NameError as exc:
        line = discovery.one_line(exc)
    assert line == "/src/orders/lambdas.py:2: NameError: name 'undefined_name' is not defined"
