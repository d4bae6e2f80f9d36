"""A group's members in order (its counts, its callback's results): members only.

Built CONCURRENTLY on PostgreSQL, so that a store with millions of tasks keeps taking writes
while it is built; other databases build it as usual.
"""

from django.db import migrations, models

INDEX = models.Index(fields=["group", "id"], name="task_group_member",
                     condition=models.Q(group__isnull=False))


def _create(apps, schema_editor) -> None:
    model = apps.get_model("tasks_core", "TaskEntity")
    if schema_editor.connection.vendor == "postgresql":
        # IF NOT EXISTS: a build that was interrupted left an invalid index; drop it by hand
        # (docs/production.md) or let this run again after it.
        schema_editor.execute(str(INDEX.create_sql(model, schema_editor, concurrently=True))
                              .replace("CREATE INDEX CONCURRENTLY",
                                       "CREATE INDEX CONCURRENTLY IF NOT EXISTS", 1))
    else:
        schema_editor.add_index(model, INDEX)


def _drop(apps, schema_editor) -> None:
    model = apps.get_model("tasks_core", "TaskEntity")
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {INDEX.name}")
    else:
        schema_editor.remove_index(model, INDEX)


class Migration(migrations.Migration):

    atomic = False  # CREATE INDEX CONCURRENTLY cannot run in a transaction

    dependencies = [
        ('tasks_core', '0022_groups'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.AddIndex(model_name='taskentity', index=INDEX)],
            database_operations=[migrations.RunPython(_create, _drop)],
        ),
    ]
