"""A paginator for big tables that never runs a full COUNT(*).

It counts at most `exact_up_to` rows (a bounded `SELECT COUNT(*) FROM (… ORDER BY … LIMIT n)`,
in the list's own order, so it walks the same index as the page it counts for); past that it
takes the planner's row estimate on PostgreSQL (EXPLAIN, which reads pg_class.reltuples and the
column statistics), so opening a list of a million tasks costs milliseconds.
"""

from __future__ import annotations

import json
import logging

from django.core.paginator import Paginator
from django.db import connections
from django.db.models import QuerySet
from django.utils.functional import cached_property

logger = logging.getLogger(__name__)


def planner_estimate(queryset: QuerySet) -> int | None:
    """The PostgreSQL planner's estimate of the rows `queryset` returns, or None elsewhere."""
    connection = connections[queryset.db]
    if connection.vendor != "postgresql":
        return None
    sql, params = queryset.order_by().values("pk").query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
        plan = cursor.fetchone()[0]
    if isinstance(plan, str):
        plan = json.loads(plan)
    return int(plan[0]["Plan"]["Plan Rows"])


class EstimatedCountPaginator(Paginator):
    """Exact counts for small results, the planner's estimate (marked `is_estimate`) past that."""

    exact_up_to = 1000

    @cached_property
    def count(self) -> int:
        queryset = self.object_list
        if not isinstance(queryset, QuerySet):
            return len(queryset)
        bounded = queryset.values("pk")[: self.exact_up_to + 1].count()
        if bounded <= self.exact_up_to:
            self.is_estimate = False
            return bounded
        self.is_estimate = True
        estimate = planner_estimate(queryset)
        return max(estimate or 0, bounded)

    is_estimate = False
