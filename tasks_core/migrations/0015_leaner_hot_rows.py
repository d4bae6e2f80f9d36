"""Fewer WAL bytes per task: room on each page of the rows every transition rewrites, and one
redundant index fewer.

A row updated in place on its own page is logged as the bytes that changed (PostgreSQL's
prefix and suffix compression of an update on the same page), and a later update may be HOT;
with full pages every update moves the row to another page and logs it whole. The attempt
rows' foreign-key index duplicates attempt_task_number, which starts with the same column.
"""

from django.db import migrations, models

#: Percent of each page filled by inserts; the rest is left for the updates of the same rows.
FILLFACTOR = 70
TABLES = ("tasks_core_taskentity", "tasks_core_taskassoc")


def _fillfactor(value: str):
    def apply(apps, schema_editor) -> None:
        if schema_editor.connection.vendor != "postgresql":
            return  # a storage parameter of PostgreSQL's; other databases have no such thing
        for table in TABLES:
            schema_editor.execute(f"ALTER TABLE {table} {value}")
    return apply


class Migration(migrations.Migration):

    dependencies = [
        ('tasks_core', '0014_attempt_worker_index'),
    ]

    operations = [
        migrations.AlterField(
            model_name='taskattempt',
            name='task',
            field=models.ForeignKey(db_index=False, on_delete=models.deletion.CASCADE,
                                    related_name='attempt_history', to='tasks_core.taskentity'),
        ),
        migrations.RunPython(_fillfactor(f"SET (fillfactor = {FILLFACTOR})"),
                             _fillfactor("RESET (fillfactor)")),
    ]
