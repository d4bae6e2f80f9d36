"""Migration operations that add or drop an index of a large table without stopping its writes.

On PostgreSQL the index is built and dropped CONCURRENTLY (the migration must say `atomic =
False`), with IF NOT EXISTS and IF EXISTS: a build that was interrupted leaves an invalid index,
which the operator drops (docs/production.md) before running it again, or which this run
skips. Other databases build and drop it as `AddIndex` and `RemoveIndex` do.
`replaced_concurrently` changes an index that keeps its name (its columns, their order) the
same way.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations, models


def _model(operation: Any, app_label: str, schema_editor: Any, state: Any) -> Any | None:
    """The indexed model in `state`, or None where this database does not migrate it."""
    model = state.apps.get_model(app_label, operation.model_name)
    return model if operation.allow_migrate_model(schema_editor.connection.alias, model) else None


class ConcurrentIndex(migrations.AddIndex):
    """`AddIndex`, built and dropped CONCURRENTLY on PostgreSQL."""

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any,
                          to_state: Any) -> None:
        if (model := _model(self, app_label, schema_editor, to_state)) is None:
            return
        if schema_editor.connection.vendor != "postgresql":
            schema_editor.add_index(model, self.index)
            return
        _create(schema_editor, model, self.index)

    def database_backwards(self, app_label: str, schema_editor: Any, from_state: Any,
                           to_state: Any) -> None:
        if (model := _model(self, app_label, schema_editor, from_state)) is None:
            return
        if schema_editor.connection.vendor != "postgresql":
            schema_editor.remove_index(model, self.index)
        else:
            _drop(schema_editor, self.index.name)


class ConcurrentIndexRemoval(migrations.RemoveIndex):
    """`RemoveIndex`, dropped (and built again backwards) CONCURRENTLY on PostgreSQL."""

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any,
                          to_state: Any) -> None:
        if _model(self, app_label, schema_editor, from_state) is None:
            return
        if schema_editor.connection.vendor != "postgresql":
            super().database_forwards(app_label, schema_editor, from_state, to_state)
        else:
            _drop(schema_editor, self.name)

    def database_backwards(self, app_label: str, schema_editor: Any, from_state: Any,
                           to_state: Any) -> None:
        if (model := _model(self, app_label, schema_editor, to_state)) is None:
            return
        if schema_editor.connection.vendor != "postgresql":
            super().database_backwards(app_label, schema_editor, from_state, to_state)
        else:
            index = to_state.models[app_label, self.model_name_lower].get_index_by_name(self.name)
            _create(schema_editor, model, index)


def replaced_concurrently(model_name: str, index: models.Index) -> list[Any]:
    """The operations that give the index named `index.name` the definition `index` without
    stopping writes: the new one built CONCURRENTLY as `<name>_new`, the old one dropped
    CONCURRENTLY, and the new one renamed to the name (a rename takes a lock that writers do
    not wait for). An interrupted run leaves `<name>_new` behind, INVALID where its build
    stopped, for the operator to drop (docs/production.md)."""
    building = f"{index.name}_new"
    return [
        ConcurrentIndex(model_name=model_name, index=models.Index(
            fields=index.fields, name=building, condition=index.condition)),
        ConcurrentIndexRemoval(model_name=model_name, name=index.name),
        migrations.RenameIndex(model_name=model_name, new_name=index.name, old_name=building),
    ]


def _create(schema_editor: Any, model: Any, index: Any) -> None:
    sql = str(index.create_sql(model, schema_editor, concurrently=True))
    schema_editor.execute(sql.replace("CREATE INDEX CONCURRENTLY",
                                      "CREATE INDEX CONCURRENTLY IF NOT EXISTS", 1))


def _drop(schema_editor: Any, name: str) -> None:
    schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
