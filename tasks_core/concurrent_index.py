"""A migration operation that adds an index to a large table without stopping its writes.

On PostgreSQL the index is built CONCURRENTLY (the migration must say `atomic = False`), with
IF NOT EXISTS: a build that was interrupted leaves an invalid index, which the operator drops
(docs/production.md) before running it again, or which this run skips. Other databases build
it as `AddIndex` does.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations


class ConcurrentIndex(migrations.AddIndex):
    """`AddIndex`, built and dropped CONCURRENTLY on PostgreSQL."""

    def _model(self, app_label: str, schema_editor: Any, state: Any) -> Any | None:
        """The indexed model in `state`, or None where this database does not migrate it."""
        model = state.apps.get_model(app_label, self.model_name)
        return model if self.allow_migrate_model(schema_editor.connection.alias, model) else None

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any,
                          to_state: Any) -> None:
        if (model := self._model(app_label, schema_editor, to_state)) is None:
            return
        if schema_editor.connection.vendor != "postgresql":
            schema_editor.add_index(model, self.index)
            return
        sql = str(self.index.create_sql(model, schema_editor, concurrently=True))
        schema_editor.execute(sql.replace("CREATE INDEX CONCURRENTLY",
                                          "CREATE INDEX CONCURRENTLY IF NOT EXISTS", 1))

    def database_backwards(self, app_label: str, schema_editor: Any, from_state: Any,
                           to_state: Any) -> None:
        if (model := self._model(app_label, schema_editor, from_state)) is None:
            return
        if schema_editor.connection.vendor != "postgresql":
            schema_editor.remove_index(model, self.index)
        else:
            schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {self.index.name}")
