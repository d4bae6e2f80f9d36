"""Every declared lambda option reaches every reader from its one declaration
(tasks_core.lambda_options): adding an option is one declaration plus its use.

The walk is over `lambda_options.OPTIONS`, so an option added there is walked too: its code
default in the registry, its column's default and validator, its bounds in an operator's
override, the API's message for a value out of bounds, the console form's field,
`atf_lambda`'s flag and the `@task` option.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from io import StringIO

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse

from tasks_console.options import OverridesForm
from tasks_core import directory, lambda_sync, overrides, registry
from tasks_core.contrib.task_options import LAMBDA_OPTIONS, TASK_OPTIONS, ATFTask
from tasks_core.contrib.tasks_compat import InvalidTaskError, task
from tasks_core.exceptions import InvalidOverride
from tasks_core.lambda_options import OPTIONS, Option
from tasks_core.models import Lambda, LambdaOverride
from tests.integration.tasks_api.test_api_support import Member, member

pytestmark = pytest.mark.django_db

NAME = "alpha.work"  #: the lambda of `member("alpha")`
CODE_NAME = "tests.lambda_options.walked"

WALKED = pytest.mark.parametrize("option", OPTIONS, ids=[option.name for option in OPTIONS])


def _too_big(option: Option) -> float:
    """A value past the option's upper bound, which every option has."""
    return option.most * 10


@pytest.fixture
def alice() -> Member:
    return member("alpha")


@pytest.fixture
def code_lambda() -> Iterator[None]:
    yield
    registry.unregister(CODE_NAME)
    lambda_sync.sync_to_store()


@WALKED
def test_the_registry_gives_the_declared_default_and_keeps_a_given_value(
        option: Option, code_lambda: None) -> None:
    registry.register(CODE_NAME)(lambda ctx, payload: None)
    assert getattr(registry.get(CODE_NAME).options, option.column) == option.default()
    registry.unregister(CODE_NAME)
    registry.register(CODE_NAME, **{option.name: option.most})(lambda ctx, payload: None)
    assert getattr(registry.get(CODE_NAME).options, option.column) == option.most
    # ...which the sync writes to its column, and the directory reads back
    lambda_sync.sync_to_store()
    assert getattr(Lambda.objects.get(name=CODE_NAME), option.column) == option.most
    assert getattr(directory.by_name(CODE_NAME), option.column) == option.most


@WALKED
def test_the_registry_refuses_a_value_out_of_bounds(option: Option) -> None:
    with pytest.raises(ValueError, match=f"lambda '{CODE_NAME}': {option.name} must be"):
        registry.register(CODE_NAME, **{option.name: _too_big(option)})


@WALKED
def test_the_column_takes_its_default_and_its_validator_from_the_declaration(
        option: Option) -> None:
    column = Lambda._meta.get_field(option.column)
    assert column.get_default() == (None if option.nullable else option.default())
    assert column.null is option.nullable
    with pytest.raises(ValidationError) as raised:
        column.run_validators(_too_big(option))
    assert raised.value.messages == [option.problem(_too_big(option))]


@WALKED
def test_an_operator_override_is_held_to_the_declared_bounds(option: Option) -> None:
    if not option.overridable:
        with pytest.raises(InvalidOverride) as raised:
            overrides.check({option.name: option.most})
        assert list(raised.value.errors) == [option.name]
        return
    assert overrides.check({option.name: option.most}) == {option.name: option.most}
    with pytest.raises(InvalidOverride) as raised:
        overrides.check({option.name: _too_big(option)})
    assert raised.value.errors == {option.name: [option.problem(_too_big(option))]}


@WALKED
def test_the_api_answers_a_value_out_of_bounds_with_the_declared_message(
        option: Option, alice: Member) -> None:
    response = alice.client.patch(f"/api/v1/lambdas/{NAME}/", {option.name: _too_big(option)},
                                  format="json")
    assert response.status_code == 400
    expected = (option.problem(_too_big(option)) if option.overridable
                else f"Unknown option; use {', '.join(overrides.BY_NAME)}.")
    assert expected in str(response.json())
    assert not LambdaOverride.objects.exists()


@WALKED
def test_the_console_form_has_a_field_for_each_option_an_operator_may_override(
        option: Option, alice: Member, admin_client: Client) -> None:
    form = OverridesForm(alice.lam)
    assert (option.name in form.fields) is option.overridable
    if option.overridable:
        assert form.fields[option.name].help_text.startswith(option.text)
        url = reverse("admin:tasks_core_lambda_options", args=[alice.lam.pk])
        response = admin_client.post(url, {option.name: str(_too_big(option))})
        assert response.context["form"].errors == {
            option.name: [option.problem(_too_big(option))]}


@WALKED
def test_atf_lambda_has_a_flag_for_each_option_an_operator_may_override(
        option: Option, alice: Member) -> None:
    flag = "--" + option.name.replace("_", "-")
    if not option.overridable:
        with pytest.raises(CommandError, match="unrecognized arguments"):
            call_command("atf_lambda", NAME, flag, "1", stdout=StringIO())
        return
    with pytest.raises(CommandError) as raised:
        call_command("atf_lambda", NAME, flag, str(_too_big(option)), stdout=StringIO())
    assert str(raised.value) == f"{flag} {_too_big(option)}: {option.problem(_too_big(option))}"


def walked_task() -> None:
    """A @task function at module level, as Django requires."""


@WALKED
def test_task_takes_each_option_and_holds_it_to_the_declared_bounds(option: Option) -> None:
    assert option.name in (TASK_OPTIONS if option.per_task else LAMBDA_OPTIONS)
    given = task(lambda_name="tests.own", **{option.name: option.most})(walked_task)
    assert isinstance(given, ATFTask)
    assert given.option(option.name) == option.most
    assert given.lambda_options()[option.name] == option.most
    assert (option.name in given.per_task_options()) is option.per_task
    with pytest.raises(InvalidTaskError,
                       match=re.escape(f"{option.name} must be at most {option.most:g}")):
        task(lambda_name="tests.own", **{option.name: _too_big(option)})(walked_task)


PER_TASK = [option for option in OPTIONS if option.per_task]


@pytest.mark.parametrize("option", PER_TASK, ids=[option.name for option in PER_TASK])
def test_a_task_may_ask_for_each_per_task_option_within_the_lambdas_bounds(
        option: Option, alice: Member) -> None:
    from tasks_core import atf
    from tasks_core.exceptions import InvalidTask
    from tests.integration.tasks_api.test_api_support import schedule

    most = int(option.most) if option.whole else option.most
    # At the option's upper bound, through the API and through schedule()
    assert schedule(alice, **{option.name: most}).status_code == 201
    atf.schedule(alice.lam.name, **{option.name: most})
    # Past it, a field error from both
    answer = schedule(alice, **{option.name: int(_too_big(option))})
    assert answer.status_code == 400
    assert list(answer.json()) == [option.name], answer.json()
    with pytest.raises(InvalidTask) as raised:
        atf.schedule(alice.lam.name, **{option.name: int(_too_big(option))})
    assert list(raised.value.errors) == [option.name]
