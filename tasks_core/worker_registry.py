"""The worker registry: the one writer of Worker rows.

A direct worker writes its own row through this module, the worker API writes a remote
worker's, and the consumer's housekeeping marks the workers that stopped being seen; which
rows count as live is `tasks_core.liveness`'s rule.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction

from tasks_core.exceptions import WorkerExists
from tasks_core.models import Worker

logger = logging.getLogger(__name__)


def register(*, worker_id: str, host: str, pid: int, lambda_names: Sequence[str], threads: int,
             now: datetime, credential: str = "") -> Worker:
    """Add a starting worker's row; WorkerExists if its id is taken. `credential`: who may act
    as it (a remote worker's token, "token:<id>"; empty for a direct worker)."""
    try:
        with transaction.atomic():
            return Worker.objects.create(worker_id=worker_id, host=host, pid=pid,
                                         lambdas=list(lambda_names), threads=threads,
                                         started_at=now, last_seen=now, credential=credential)
    except IntegrityError as exc:
        raise WorkerExists(f"worker {worker_id!r} is registered already") from exc


def of_credential(credential: str) -> list[str]:
    """The ids of every worker `credential` registered (stopped ones too: a task may still
    name one)."""
    return list(Worker.objects.filter(credential=credential).values_list("worker_id", flat=True))


def seen(worker_id: str, *, now: datetime) -> None:
    """The worker heartbeated at `now`."""
    Worker.objects.filter(worker_id=worker_id).update(last_seen=now)


def stopped(worker_id: str, *, now: datetime) -> None:
    """The worker stopped at `now`."""
    Worker.objects.filter(worker_id=worker_id).update(stopped_at=now)


def mark_gone(*, now: datetime, unseen_s: float) -> int:
    """Mark stopped the workers not seen for `unseen_s` seconds (killed, or cut off); how many."""
    return Worker.objects.filter(stopped_at__isnull=True,
                                 last_seen__lt=now - timedelta(seconds=unseen_s)).update(
        stopped_at=now)
