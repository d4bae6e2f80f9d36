"""Operator overrides of lambda options: they win over the code, survive code syncs and
`migrate`, reach the consumer and the workers' directory, and bad values change nothing."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone

from tasks_core import atf, directory, lambda_sync, operations, overrides, queues, registry, store
from tasks_core.access import Scope
from tasks_core.exceptions import InvalidOverride, LambdaNotFound
from tasks_core.models import Lambda, LambdaOverride
from workers.consumer import Consumer

pytestmark = [pytest.mark.django_db]

NAME = "tests.overridden"
#: The code's options of NAME, and an operator's value for each.
CODE = {"max_attempts": 4, "heartbeat_timeout": 40.0, "backoff_base": 2.0, "backoff_cap": 90.0,
        "quota": 10.0, "timeout": 60.0, "concurrency": 5, "rate": 10.0, "key_concurrency": 1,
        "key_rate": 2.0}
OPERATOR = {"max_attempts": 9, "heartbeat_timeout": 120.0, "backoff_base": 0.5,
            "backoff_cap": 30.0, "quota": 20.0, "timeout": 300.0, "concurrency": 50,
            "rate": 0.5, "key_concurrency": 3, "key_rate": 1.0}


def _register(**options: Any) -> None:
    registry.unregister(NAME)
    registry.register(NAME, team="billing", **{**CODE, **options})(
        lambda ctx, payload: None)
    lambda_sync.sync_to_store()


@pytest.fixture
def lam() -> Iterator[Lambda]:
    _register()
    yield Lambda.objects.get(name=NAME)
    registry.unregister(NAME)


def _in_effect() -> dict[str, Any]:
    directory.clear()
    info = directory.by_name(NAME)
    return {option.name: getattr(info, option.column) for option in overrides.OPTIONS}


def test_every_option_reads_the_codes_value_until_an_operator_overrides_it(lam: Lambda) -> None:
    assert _in_effect() == CODE
    overrides.apply(lam, OPERATOR, by="alice", now=timezone.now())
    assert _in_effect() == OPERATOR
    shown = overrides.resolve(Lambda.objects.get(pk=lam.pk))
    assert {name: (item.value, item.source, item.code_value, item.changed_by)
            for name, item in shown.items()} == {
        name: (OPERATOR[name], "operator", CODE[name], "alice") for name in CODE}


def test_overrides_survive_a_restart_migrate_and_new_code(lam: Lambda) -> None:
    # Given overrides of every option
    overrides.apply(lam, OPERATOR, by="alice", now=timezone.now())
    # When the code syncs at start, `migrate` runs, and new code changes every option
    lambda_sync.sync_to_store()
    call_command("migrate", verbosity=0)
    _register(max_attempts=2, heartbeat_timeout=50, backoff_base=3, backoff_cap=70, quota=5,
              timeout=10)
    # Then the operator's values still apply, while the code's values are the new code's
    assert _in_effect() == OPERATOR
    row = Lambda.objects.get(pk=lam.pk)
    assert (row.max_attempts, row.quota_per_s) == (2, 5.0)


def test_clearing_an_override_returns_to_the_codes_current_value(lam: Lambda) -> None:
    overrides.apply(lam, {"quota": 20, "max_attempts": 9}, by="alice", now=timezone.now())
    _register(quota=7)
    overrides.apply(lam, {"quota": None}, by="bob", now=timezone.now())
    assert _in_effect()["quota"] == 7.0
    assert _in_effect()["max_attempts"] == 9
    overrides.reset(lam, by="bob", now=timezone.now())
    assert _in_effect() == {**CODE, "quota": 7.0}
    assert not LambdaOverride.objects.filter(lambda_ref=lam).exists()


@pytest.mark.parametrize(("changes", "field"), [
    ({"max_attempts": 0}, "max_attempts"),
    ({"max_attempts": 2.5}, "max_attempts"),
    ({"max_attempts": True}, "max_attempts"),
    ({"quota": 0}, "quota"),
    ({"quota": "fast"}, "quota"),
    ({"quota": float("nan")}, "quota"),
    ({"quota": float("inf")}, "quota"),
    ({"heartbeat_timeout": 15}, "heartbeat_timeout"),  # not above 3 intervals of 5 s
    ({"backoff_base": -1}, "backoff_base"),
    ({"backoff_cap": 0}, "backoff_cap"),
    ({"backoff_cap": 1e12}, "backoff_cap"),
    ({"timeout": -0.5}, "timeout"),
    ({"timeout": -5}, "timeout"),
    ({"speed": 3}, "speed"),
])
def test_a_bad_value_names_its_option_and_changes_nothing(lam: Lambda, changes: dict,
                                                          field: str) -> None:
    with pytest.raises(InvalidOverride) as raised:
        overrides.apply(lam, {"backoff_base": 5, **changes}, by="alice", now=timezone.now())
    assert list(raised.value.errors) == [field]
    assert not LambdaOverride.objects.exists()


def test_a_task_scheduled_after_an_override_gets_the_operators_max_attempts(lam: Lambda) -> None:
    overrides.apply(lam, {"max_attempts": 9}, by="alice", now=timezone.now())
    assert atf.schedule(NAME).max_attempts == 9


def test_the_consumer_spends_the_operators_quota(lam: Lambda,
                                                 queue: queues.QueueBackend) -> None:
    # Given a lambda whose code quota is 10/s, with 100 due tasks, and an override of 20/s
    now = timezone.now() + timedelta(seconds=1)
    store.create([store.NewTask(lambda_id=lam.pk, collection="default", priority="default",
                                payload={}, run_at=now, max_attempts=3)] * 100, now=now)
    overrides.apply(lam, {"quota": 20}, by="alice", now=now)
    consumer = Consumer(batch_size=500, poll_interval_s=0.1, queue=queue, clock=lambda: now)
    # When it polls several times within one second, it enqueues one second's worth of 20/s
    assert sum(consumer.run_pass().enqueued for _ in range(3)) == 20


def test_a_worker_reads_the_operators_heartbeat_timeout(lam: Lambda,
                                                         queue: queues.QueueBackend) -> None:
    from workers.transport import DirectTransport

    transport = DirectTransport(queue)
    try:
        assert transport.heartbeat_timeouts_s([NAME]) == {NAME: 40.0}
        operations.set_options(Scope(frozenset({lam.team_id})), NAME,
                               {"heartbeat_timeout": 60}, by="alice")
        assert transport.heartbeat_timeouts_s([NAME]) == {NAME: 60.0}
    finally:
        transport.let_go()


def test_an_operator_outside_the_lambdas_team_cannot_override_it(lam: Lambda) -> None:
    other = Scope(frozenset({lam.team_id + 1000}))
    with pytest.raises(LambdaNotFound):
        operations.set_options(other, NAME, {"quota": 1}, by="mallory")
    assert not LambdaOverride.objects.exists()
    row = operations.set_options(Scope(frozenset({lam.team_id})), NAME, {"quota": 1}, by="alice")
    assert overrides.resolve(row)["quota"].source == "operator"
