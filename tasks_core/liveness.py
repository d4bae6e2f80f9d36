"""When a worker process counts as live: one rule, from its heartbeat, for every view of workers.

A worker writes `last_seen` on every heartbeat and terminates itself after
MAX_FAILED_HEARTBEATS intervals without a successful one. So a worker whose `last_seen` is
older than one interval more than that has crashed, was killed, or has cut itself off.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import QuerySet

from tasks_core.conf import atf_settings
from tasks_core.heartbeat_rule import MAX_FAILED_HEARTBEATS
from tasks_core.models import Worker


def live_within_s() -> float:
    """Seconds since its last heartbeat within which a worker counts as live."""
    return (MAX_FAILED_HEARTBEATS + 1) * atf_settings.heartbeat_interval_s


def live_workers(*, now: datetime) -> QuerySet[Worker]:
    """Workers not stopped whose last heartbeat is recent enough for them to be running."""
    fresh = now - timedelta(seconds=live_within_s())
    return Worker.objects.filter(stopped_at__isnull=True, last_seen__gte=fresh)


def is_live(worker: Worker, *, now: datetime) -> bool:
    """The same rule as `live_workers`, for one row already read."""
    age_s = (now - worker.last_seen).total_seconds()
    return worker.stopped_at is None and age_s <= live_within_s()
