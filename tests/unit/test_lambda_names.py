"""The one rule for a lambda's name (tasks_core.lambda_names), and register() holding to it."""

from __future__ import annotations

import pytest

from tasks_core import atf, lambda_names, registry
from tasks_core.exceptions import InvalidLambdaDefinition

GOOD = ["a", "billing.send_invoice", "shop:receipts-v2", "A_1.b-c:d", "x" * 200]
BAD = ["", "send invoice", "billing/send", "alert!", "café", "tab\tname", "x" * 201, None, 7]


@pytest.mark.parametrize("name", GOOD)
def test_a_name_of_ascii_letters_digits_and_the_four_marks_is_a_lambda_name(name: str) -> None:
    assert lambda_names.problem(name) is None


@pytest.mark.parametrize("name", BAD)
def test_anything_else_is_refused_with_the_rule(name: object) -> None:
    problem = lambda_names.problem(name)
    assert problem is not None
    assert problem.endswith("is not a lambda name: use 1 to 200 ASCII letters, digits and "
                            "_ - . :.")


def test_a_long_name_is_shown_cut_short() -> None:
    assert lambda_names.problem("x" * 1000) == (
        f"{'x' * 60!r}… is not a lambda name: use 1 to 200 ASCII letters, digits and _ - . :.")


@pytest.mark.parametrize("name", ["send invoice", "billing/send", "alert!", "x" * 201])
def test_register_refuses_a_name_that_breaks_the_rule(name: str) -> None:
    with pytest.raises(InvalidLambdaDefinition, match="is not a lambda name") as caught:
        atf.register(name)(lambda ctx, payload: None)
    assert isinstance(caught.value, ValueError)  # what register raised for bad options before
    assert name not in registry.names()
