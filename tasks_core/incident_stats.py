"""What the shipped alert rules watch (deploy/prometheus/), read when `/metrics` is scraped.

Each function answers one on-call question per lambda, in one query: how long has its oldest
waiting task been due, how many live workers serve it, how many attempts lost their worker
recently, and is its gate closed. `tasks_api.health` turns them into gauges.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from datetime import datetime

from django.db.models import Count, Min, QuerySet

from tasks_core import gating, liveness, shards
from tasks_core.models import Lambda, TaskAttempt, TaskEntity
from tasks_core.states import TaskStatus

#: Statuses of a task that is due and has not started yet.
WAITING_TO_START = (TaskStatus.NEW, TaskStatus.ENQUEUED, TaskStatus.CLAIMED)


def _lambdas(lambda_ids: Collection[int] | None) -> QuerySet[Lambda]:
    lambdas = Lambda.objects.order_by("name")
    return lambdas if lambda_ids is None else lambdas.filter(pk__in=list(lambda_ids))


@shards.across(shards.latest)
def oldest_due_s(*, now: datetime, lambda_ids: Collection[int] | None = None,
                 ) -> dict[str, float]:
    """lambda name -> seconds since the oldest of its due, unstarted tasks became due (its
    run_at); lambdas with none are left out."""
    tasks = TaskEntity.objects.filter(status__in=list(WAITING_TO_START), run_at__lte=now)
    if lambda_ids is not None:
        tasks = tasks.filter(lambda_ref_id__in=list(lambda_ids))
    rows = tasks.order_by().values_list("lambda_ref__name").annotate(oldest=Min("run_at"))
    return {name: (now - oldest).total_seconds() for name, oldest in rows}


def workers_by_lambda(*, now: datetime, lambda_ids: Collection[int] | None = None,
                      ) -> dict[str, int]:
    """lambda name -> live worker processes that serve it (0 for none); a worker started
    without lambda names serves every lambda."""
    names = list(_lambdas(lambda_ids).values_list("name", flat=True))
    served: Counter[str] = Counter()
    for lambdas in liveness.live_workers(now=now).values_list("lambdas", flat=True):
        served.update(names if not lambdas else set(lambdas).intersection(names))
    return {name: served[name] for name in names}


@shards.across(shards.added)
def lost_attempts(*, since: datetime, lambda_ids: Collection[int] | None = None,
                  ) -> dict[str, int]:
    """lambda name -> attempts recorded `lost` (no heartbeat within the timeout) since `since`."""
    attempts = TaskAttempt.objects.filter(outcome=TaskAttempt.Outcome.LOST, ended_at__gte=since)
    if lambda_ids is not None:
        attempts = attempts.filter(task__lambda_ref_id__in=list(lambda_ids))
    rows = attempts.order_by().values_list("task__lambda_ref__name").annotate(n=Count("pk"))
    return dict(rows)


def gates(*, now: datetime, lambda_ids: Collection[int] | None = None,
                 ) -> dict[str, str]:
    """lambda name -> its gate's state at `now` ("open", "paused" or "dropped")."""
    return {name: gating.effective(gating.Gate(state=gating.GateState(state), until=until),
                                   now).value
            for name, state, until in _lambdas(lambda_ids).values_list("name", "gate",
                                                                       "gate_until")}
