"""stats.percentile, the one percentile computed in Python, agrees with PostgreSQL's."""

from __future__ import annotations

import random

import pytest
from django.db import connection

from tasks_core import stats

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("count", [1, 2, 7, 100])
def test_percentile_is_postgresqls_percentile_cont(count: int) -> None:
    values = sorted(random.Random(count).uniform(0, 10) for _ in range(count))
    with connection.cursor() as cursor:
        cursor.execute("SELECT percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP "
                       "(ORDER BY v) FROM unnest(%s::float8[]) AS v", [values])
        (expected,) = cursor.fetchone()
    assert [stats.percentile(values, q) for q in (0.5, 0.95, 0.99)] == pytest.approx(expected)
