"""The consumer's per-pass queries, compiled once, answer as the ORM does at each `now`."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from tasks_core import atf, gating, lambda_sync
from tasks_core.models import Collection, Lambda, LambdaOverride
from workers import compiled_query
from workers.consumer import _lambda_gates_query

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]


def _built_and_run_at(now: datetime, monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """The same query, built and compiled by the ORM for this one `now`."""
    with monkeypatch.context() as patch:
        patch.setattr(compiled_query, "NOW", now)
        return list(_lambda_gates_query())


def test_the_lambda_gates_follow_now_gates_and_overrides(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a paused lambda with an until, a quota override, and a task due in a minute
    lambda_sync.sync_to_store()
    now = timezone.now()
    until = now + timedelta(hours=1)
    Lambda.objects.filter(name="demo.noop").update(gate=gating.GateState.PAUSED,
                                                   gate_until=until)
    LambdaOverride.objects.create(lambda_ref=Lambda.objects.get(name="demo.record"),
                                  option="quota", value=7.0, changed_by="test", changed_at=now)
    atf.schedule("demo.record", {"key": "demo:x"}, run_at=now + timedelta(minutes=1))
    query = compiled_query.CompiledQuery(_lambda_gates_query())
    # When it runs before and after the task is due
    before, after = query.rows(now), query.rows(now + timedelta(minutes=2))
    # Then it answers as the ORM's own query at each moment, types and all
    assert before == _built_and_run_at(now, monkeypatch)
    assert after == _built_and_run_at(now + timedelta(minutes=2), monkeypatch)
    # (pk, name, team, gate, until, quota, due per priority...)
    assert not any(any(row[6:]) for row in before)
    by_name = {row[1]: row for row in after}
    assert any(by_name["demo.record"][6:])
    assert by_name["demo.record"][5] == 7.0
    assert by_name["demo.noop"][3:5] == (gating.GateState.PAUSED, until)


def test_a_query_without_now_runs_as_compiled() -> None:
    lambda_sync.sync_to_store()
    Collection.objects.create(lambda_ref=Lambda.objects.get(name="demo.noop"), name="c",
                              gate=gating.GateState.PAUSED)
    query = compiled_query.CompiledQuery(
        Collection.objects.exclude(gate=gating.GateState.OPEN).values_list("name", "gate"))
    assert query.rows() == [("c", gating.GateState.PAUSED)]
