"""The rate limits' start log (FlowStart rows) kept short: rows no window can count go.

A claim deletes the rows of each lambda and key it decides on once they leave the window
(tasks_core.flow), but the rows of a key that never starts again, or of a lambda whose rate was
taken off, would stay for ever: a million merchants each started once under a `key_rate` would
be a million rows for good. The consumer's housekeeping deletes every row older than the
longest window a rate can have (an hour), batch after batch within a time budget
(tasks_core.retention.in_batches); the `flow_start_at` index finds them, so a round reads only
what it deletes. No claim counts such a row, whatever the lambda's limits are now (an
operator's change the consumer has not seen yet included). Ages are measured by the
database's clock, as the claims measure them.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.db.models import DateTimeField, ExpressionWrapper
from django.db.models.functions import Now

from tasks_core import rates, retention
from tasks_core.models import FlowStart

logger = logging.getLogger(__name__)

#: The longest window a rate can have: no claim counts a start older than this.
LONGEST_WINDOW_S = max(rates.UNITS.values())


def prune(*, budget_s: float | None, batch_size: int = 1000) -> int:
    """Delete the rows no window counts, batch after batch, until none is left or `budget_s`
    seconds are spent (None: no limit); return how many were deleted."""
    return retention.in_batches(lambda: prune_batch(batch_size=batch_size),
                                batch_size=batch_size, budget_s=budget_s)


def prune_batch(*, batch_size: int = 1000) -> int:
    """Delete up to `batch_size` rows older than the longest window; return how many. Two
    short statements; a claim deleting some of the same rows meanwhile only leaves fewer."""
    cutoff = ExpressionWrapper(Now() - timedelta(seconds=LONGEST_WINDOW_S),
                               output_field=DateTimeField())
    ids = list(FlowStart.objects.filter(at__lt=cutoff).order_by("at")
               .values_list("pk", flat=True)[:batch_size])
    if not ids:
        return 0
    rows = FlowStart.objects.filter(pk__in=ids)
    deleted = rows._raw_delete(rows.db)
    logger.debug("pruned %d start(s) of the rate limits' log", deleted,
                 extra={"action": "flow_starts_pruned"})
    return deleted
