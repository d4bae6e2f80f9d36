from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from tasks_core import atf, conf, periodic, registry
from tasks_core.context import TaskContext
from tasks_core.exceptions import (
    ConfigurationError,
    DuplicateLambda,
    InvalidLambdaDefinition,
    LambdaNotFound,
)


@pytest.fixture
def registered() -> Iterator[str]:
    name = "tests.unit_registered"

    @atf.register(name, max_attempts=7, heartbeat_timeout=45, quota=10, team="billing")
    def handler(ctx: TaskContext, payload: dict) -> dict:
        return {"doubled": payload["n"] * 2}

    yield name
    registry.unregister(name)


def test_register_records_options_and_keeps_the_function_callable(registered: str) -> None:
    lam = registry.get(registered)
    assert lam.options.max_attempts == 7
    assert lam.options.heartbeat_timeout_s == 45
    assert lam.options.quota_per_s == 10
    assert lam.options.team == "billing"
    ctx = TaskContext(task_id=1, attempt=1, collection="default", priority="default",
                      lambda_name=registered)
    assert lam(ctx, {"n": 4}) == {"doubled": 8}


@pytest.mark.parametrize(("setting_s", "timeout", "limit_s"), [
    (600.0, None, 600.0),  # registered without one: the default
    (600.0, 30, 30),  # its own
    (600.0, 0, None),  # its own "no limit"
    (0, None, None),  # a deployment without a default limit
    (None, None, None),
])
def test_a_lambdas_time_limit_is_its_own_else_the_default(
        settings: object, setting_s: float | None, timeout: float | None,
        limit_s: float | None) -> None:
    settings.ATF_TASK_TIMEOUT_S = setting_s  # type: ignore[attr-defined]
    lam = atf.register("tests.unit_limited", timeout=timeout)(lambda ctx, payload: None)
    try:
        assert lam.options.timeout_s == limit_s
    finally:
        registry.unregister("tests.unit_limited")


def test_every_attempt_has_a_time_limit_by_default() -> None:
    assert conf.AtfSettings.task_timeout_s == 600.0


def test_a_duplicate_name_raises_at_registration(registered: str) -> None:
    with pytest.raises(DuplicateLambda):
        atf.register(registered)(lambda ctx, payload: None)


def test_demo_lambdas_are_discovered_from_lambdas_py() -> None:
    assert {"demo.noop", "demo.sleep", "demo.fail", "demo.record"} <= set(registry.names())


def test_an_unknown_lambda_raises() -> None:
    with pytest.raises(LambdaNotFound):
        registry.get("no.such.lambda")


def test_register_with_a_schedule_defines_its_code_schedule() -> None:
    name = "tests.unit_scheduled"
    try:
        atf.register(name, schedule=300)(lambda ctx, payload: None)
        assert name in registry.names()
        assert [(s.lambda_name, s.interval_s) for s in periodic.specs() if s.name == name] == [
            (name, 300.0)]
    finally:
        registry.unregister(name)
        periodic.forget(name)


@pytest.mark.parametrize("schedule", ["every tuesday", 0.5])
def test_a_bad_schedule_registers_nothing(schedule: object) -> None:
    name = "tests.unit_badly_scheduled"
    with pytest.raises(ConfigurationError):
        atf.register(name, schedule=schedule)(lambda ctx, payload: None)
    assert name not in registry.names()
    assert name not in {s.name for s in periodic.specs()}


def test_a_schedule_whose_name_is_taken_registers_nothing() -> None:
    name = "tests.unit_taken"
    periodic.every(60, "demo.noop", name=name)
    try:
        with pytest.raises(ConfigurationError):
            atf.register(name, schedule=30)(lambda ctx, payload: None)
        assert name not in registry.names()
    finally:
        periodic.forget(name)


def test_register_names_a_misspelt_option_and_lists_those_there_are() -> None:
    with pytest.raises(TypeError) as raised:
        atf.register("tests.misspelt", max_attempt=3)
    assert str(raised.value).startswith(
        "lambda 'tests.misspelt': unknown option(s) max_attempt; the options are ")
    assert "max_attempts" in str(raised.value)
    with pytest.raises(LambdaNotFound):
        registry.get("tests.misspelt")


@pytest.mark.parametrize(("options", "message"), [
    ({"max_attempts": 0}, "max_attempts must be a whole number of at least 1"),
    ({"max_attempts": 2.5}, "max_attempts must be a whole number of at least 1"),
    ({"heartbeat_timeout": 0}, "heartbeat_timeout must be a number above 0"),
    ({"timeout": -1}, "timeout must be a number of seconds, 0 or more"),
    ({"backoff_cap": 2e9}, "backoff_cap must be at most 1e+09"),
    ({"quota": True}, "quota must be a number above 0"),
])
def test_register_holds_the_code_to_the_options_bounds(options: dict, message: str) -> None:
    with pytest.raises(ValueError) as raised:
        atf.register("tests.bounded", **options)
    assert str(raised.value) == f"lambda 'tests.bounded': {message}"


def test_an_async_lambda_is_marked_and_an_async_generator_is_refused_in_one_line() -> None:
    async def summarise(ctx: TaskContext, payload: dict) -> dict:
        return {}

    async def stream(ctx: TaskContext, payload: dict) -> AsyncIterator[int]:
        yield 1

    try:
        assert registry.register("tests.async_summarise")(summarise).is_async
        assert not registry.register("tests.sync_noop")(lambda ctx, payload: None).is_async
        with pytest.raises(InvalidLambdaDefinition) as refused:
            registry.register("tests.async_stream")(stream)
        assert str(refused.value) == ("lambda 'tests.async_stream': an async generator cannot be "
                                      "a lambda (a task has one result): return it from an "
                                      "async def")
        assert "tests.async_stream" not in registry.names()
    finally:
        for name in ("tests.async_summarise", "tests.sync_noop"):
            registry.unregister(name)
