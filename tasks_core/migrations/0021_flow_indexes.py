"""Flow control's partial indexes on the task table, built without locking it (CONCURRENTLY on
PostgreSQL, a plain index elsewhere). They hold only tasks a limit holds back and debounced
tasks still waiting: tasks of lambdas without limits never write them."""

from django.db import migrations, models


class ConcurrentIndex(migrations.AddIndex):
    """AddIndex, built CONCURRENTLY on PostgreSQL (no lock that stops writes to the table)."""

    def _options(self, schema_editor):
        return {"concurrently": True} if schema_editor.connection.vendor == "postgresql" else {}

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        model = to_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            schema_editor.add_index(model, self.index, **self._options(schema_editor))

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        model = from_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            schema_editor.remove_index(model, self.index, **self._options(schema_editor))


class Migration(migrations.Migration):

    atomic = False

    dependencies = [
        ('tasks_core', '0020_flow_control'),
    ]

    operations = [
        ConcurrentIndex(
            model_name='taskentity',
            index=models.Index(condition=models.Q(('held_at__isnull', False), ('status', 'new')), fields=['lambda_ref', 'priority', 'id'], name='task_flow_held'),
        ),
        ConcurrentIndex(
            model_name='taskentity',
            index=models.Index(condition=models.Q(('held_at__isnull', False), ('status', 'new')), fields=['lambda_ref', 'limit_key', 'priority', 'id'], name='task_flow_held_key'),
        ),
        ConcurrentIndex(
            model_name='taskentity',
            index=models.Index(condition=models.Q(('debounce_key__isnull', False), ('status__in', ['new', 'enqueued'])), fields=['lambda_ref', 'debounce_key'], name='task_debounce'),
        ),
    ]
