"""How long the oldest task of each queue has waited in it: the queues' age, beside their depth.

Read from the store, so every queue backend reports the same thing: an `enqueued` task is one
that the consumer handed to its <lambda, priority> queue and no worker has claimed yet, and
its `enqueued_at` is when it was handed over (a re-enqueue after the enqueue timeout keeps it).
One probe of the `task_in_queue` index per queue, which holds enqueued tasks only: the cost is
the number of queues, whatever the backlog or the history.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from django.db.models import OuterRef, Subquery

from tasks_core import shards
from tasks_core.conf import atf_settings
from tasks_core.models import Lambda, TaskEntity
from tasks_core.states import TaskStatus


@shards.across(shards.latest)
def oldest_waiting_s(*, now: datetime, lambda_ids: Collection[int] | None = None,
                     ) -> dict[str, dict[str, float]]:
    """lambda name -> priority -> seconds its oldest enqueued, unclaimed task has waited in its
    queue (0 for an empty queue); every lambda of `lambda_ids` (None: all) and priority. With
    shards, the oldest of every shard's (each reads its own copy of the lambdas)."""
    priorities = list(atf_settings.priorities)
    oldest = {
        f"oldest_{rank}": Subquery(
            TaskEntity.objects.filter(lambda_ref_id=OuterRef("pk"), priority=priority,
                                      status=TaskStatus.ENQUEUED)
            .order_by("enqueued_at").values("enqueued_at")[:1])
        for rank, priority in enumerate(priorities)
    }
    lambdas = Lambda.objects.using(shards.current()).order_by("name")
    if lambda_ids is not None:
        lambdas = lambdas.filter(pk__in=list(lambda_ids))
    return {
        name: {priority: 0.0 if since is None else max((now - since).total_seconds(), 0.0)
               for priority, since in zip(priorities, times, strict=True)}
        for name, *times in lambdas.annotate(**oldest).values_list("name", *oldest)
    }
