"""The rule that ties a heartbeat timeout to the heartbeat interval, in one place.

A worker terminates itself after MAX_FAILED_HEARTBEATS intervals without a successful
heartbeat, so a lambda's heartbeat timeout must be longer than that silence: otherwise the
consumer could enqueue a running task again while its worker still runs it. Pure, so that the
option declarations (tasks_core.lambda_options), liveness and the workers can all import it.
"""

from __future__ import annotations

#: Failed heartbeats in a row (or silent intervals) after which a worker terminates itself.
MAX_FAILED_HEARTBEATS = 3


def outlasts_heartbeats(timeout_s: float, interval_s: float) -> bool:
    """True when a heartbeat timeout is over the silence after which a worker cuts itself off."""
    return timeout_s > MAX_FAILED_HEARTBEATS * interval_s
