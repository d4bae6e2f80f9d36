"""The timeouts a lambda's triggers use (settings and the lambda's heartbeat timeout)."""

from __future__ import annotations

from datetime import datetime

from tasks_core import directory, states
from tasks_core.conf import atf_settings
from tasks_core.states import TaskStatus
from tasks_core.store.decisions import assoc_change
from tasks_core.store.values import AssocChange


def of_lambda(lambda_id: int) -> states.Timeouts:
    """The enqueue, claim and heartbeat timeouts of a lambda's tasks."""
    return states.Timeouts(
        enqueue_s=atf_settings.enqueue_timeout_s,
        claim_s=atf_settings.claim_timeout_s,
        heartbeat_s=directory.by_id(lambda_id).heartbeat_timeout_s,
    )


def assoc(target: TaskStatus, lambda_id: int, now: datetime, *, run_at: datetime | None = None,
          delay_s: float | None = None) -> AssocChange:
    """The assoc columns of a task of `lambda_id` that moves to `target` at `now`."""
    return assoc_change(target, now=now, timeouts=of_lambda(lambda_id), run_at=run_at,
                        delay_s=delay_s)
