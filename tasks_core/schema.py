"""Migration operations for a store that stays writable while it migrates."""

from __future__ import annotations

from typing import Any

from django.contrib.postgres.operations import AddIndexConcurrently as PostgresAddIndexConcurrently
from django.db import migrations


class AddIndexConcurrently(PostgresAddIndexConcurrently):
    """AddIndex that PostgreSQL builds CONCURRENTLY (writes go on while it builds; its migration
    must be `atomic = False`), and other databases (SQLite, the demo's) build as usual.

    A CONCURRENTLY build that fails leaves an INVALID index behind: drop it
    (`DROP INDEX CONCURRENTLY name`) before running the migration again.
    """

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any,
                          to_state: Any) -> None:
        if schema_editor.connection.vendor == "postgresql":
            super().database_forwards(app_label, schema_editor, from_state, to_state)
        else:
            migrations.AddIndex.database_forwards(self, app_label, schema_editor, from_state,
                                                  to_state)

    def database_backwards(self, app_label: str, schema_editor: Any, from_state: Any,
                           to_state: Any) -> None:
        if schema_editor.connection.vendor == "postgresql":
            super().database_backwards(app_label, schema_editor, from_state, to_state)
        else:
            migrations.AddIndex.database_backwards(self, app_label, schema_editor, from_state,
                                                   to_state)
