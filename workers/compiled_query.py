"""A `values_list()` query compiled to SQL once and run again with a new "now".

The consumer runs the same two ORM queries every pass; building and compiling them took most
of an idle pass, on the path of every immediate task (figures: docs/benchmarks.md). Compiled
once, a run is a cursor execute and Django's own result converters.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.db.models import QuerySet
from django.db.models.sql.compiler import SQLCompiler

from tasks_core import shards

#: Stands for "now" in the compiled parameters: a moment no real query names.
NOW = datetime(1, 1, 1, 0, 0, 0, 424242, tzinfo=UTC)


class CompiledQuery:
    """`queryset` (a values_list) compiled on first run; `NOW` in its filters is replaced by
    each run's `now`. Compiled on, and run on, the running thread's connection to the shard
    the store works on, so SQLite's and
    PostgreSQL's parameter forms both hold."""

    def __init__(self, queryset: QuerySet) -> None:
        self.queryset = queryset
        self._compiled: tuple[SQLCompiler, str, tuple[Any, ...], Any] | None = None

    def rows(self, now: datetime | None = None) -> list[tuple]:
        compiler, sql, params, placeholder = self._compile()
        connection = shards.connection()
        if now is not None:
            adapted = connection.ops.adapt_datetimefield_value(now)
            params = tuple(adapted if p == placeholder else p for p in params)
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            fetched = cursor.fetchall()
        return [tuple(row) for row in compiler.results_iter(results=[fetched])]

    def _compile(self) -> tuple[SQLCompiler, str, tuple[Any, ...], Any]:
        if self._compiled is None:
            connection = shards.connection()
            compiler = self.queryset.query.get_compiler(connection=connection)
            sql, params = compiler.as_sql()
            placeholder = connection.ops.adapt_datetimefield_value(NOW)
            self._compiled = (compiler, sql, tuple(params), placeholder)
        return self._compiled
