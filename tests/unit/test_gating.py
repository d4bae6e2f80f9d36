from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tasks_core import gating
from tasks_core.gating import Decision, Gate, GateState

NOW = datetime(2026, 1, 1, tzinfo=UTC)
PAST = NOW - timedelta(seconds=1)
FUTURE = NOW + timedelta(seconds=1)


@pytest.mark.parametrize(
    ("lambda_gate", "collection_gate", "decision"),
    [
        (Gate(), Gate(), Decision.ENQUEUE),
        (Gate(state=GateState.PAUSED), Gate(), Decision.POSTPONE),
        (Gate(), Gate(state=GateState.PAUSED), Decision.POSTPONE),
        (Gate(state=GateState.DROPPED), Gate(), Decision.DROP),
        (Gate(), Gate(state=GateState.DROPPED), Decision.DROP),
        (Gate(state=GateState.PAUSED), Gate(state=GateState.DROPPED), Decision.DROP),
        (Gate(state=GateState.PAUSED, until=PAST), Gate(), Decision.ENQUEUE),
        (Gate(state=GateState.PAUSED, until=FUTURE), Gate(), Decision.POSTPONE),
        (Gate(), Gate(state=GateState.DROPPED, until=PAST), Decision.ENQUEUE),
    ],
)
def test_decide(lambda_gate: Gate, collection_gate: Gate, decision: Decision) -> None:
    assert gating.decide(lambda_gate, collection_gate, NOW) is decision


def test_an_open_gate_stays_open_whatever_its_until() -> None:
    assert gating.effective(Gate(until=PAST), NOW) is GateState.OPEN
