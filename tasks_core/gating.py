""""May this task be enqueued now?", as pure functions of gate, until and now."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime


class GateState(enum.StrEnum):
    OPEN = "open"  #: tasks flow
    PAUSED = "paused"  #: due tasks wait, their trigger pushed forward; nothing is lost
    DROPPED = "dropped"  #: due tasks are marked dropped


class Decision(enum.StrEnum):
    ENQUEUE = "enqueue"
    POSTPONE = "postpone"
    DROP = "drop"


@dataclass(frozen=True, kw_only=True)
class Gate:
    state: GateState = GateState.OPEN
    until: datetime | None = None  #: when set, the gate reopens by itself at this time


OPEN = Gate()


def effective(gate: Gate, now: datetime) -> GateState:
    """The gate's state at `now`: a closed gate whose `until` has passed is open."""
    if gate.state is not GateState.OPEN and gate.until is not None and gate.until <= now:
        return GateState.OPEN
    return gate.state


def decide(lambda_gate: Gate, collection_gate: Gate, now: datetime) -> Decision:
    """What the consumer does with a due task under these two gates.

    A lambda gate applies to all its collections; `dropped` wins over `paused`.
    """
    states = {effective(lambda_gate, now), effective(collection_gate, now)}
    if GateState.DROPPED in states:
        return Decision.DROP
    if GateState.PAUSED in states:
        return Decision.POSTPONE
    return Decision.ENQUEUE
