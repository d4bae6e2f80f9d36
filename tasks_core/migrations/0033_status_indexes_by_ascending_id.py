"""The two status indexes of the task table by ascending id instead of descending: a task's
new row version adds its entry at the right end of its status's range, where PostgreSQL splits
a full page after the new entry (packed) rather than in half, so a drained task writes ~76
bytes of WAL fewer; a newest-first read walks the same range backwards. Each index is built
CONCURRENTLY under a name of its own, the old one dropped CONCURRENTLY, and the new one renamed
to the old name (tasks_core.concurrent_index), so that a store with millions of tasks keeps
taking writes."""

from django.db import migrations, models

from tasks_core.concurrent_index import ConcurrentIndex, ConcurrentIndexRemoval

LAMBDA_STATUS = models.Index(fields=["lambda_ref", "status", "id"],
                             name="task_lambda_status_by_id")
AT_REST = models.Index(fields=["status", "id"], name="task_status_at_rest_by_id",
                       condition=~models.Q(status__in=["enqueued", "claimed", "processing",
                                                       "success"]))


class Migration(migrations.Migration):

    atomic = False  # CREATE and DROP INDEX CONCURRENTLY cannot run in a transaction

    dependencies = [
        ('tasks_core', '0032_lean_foreign_keys'),
    ]

    operations = [
        ConcurrentIndex(model_name='taskentity', index=LAMBDA_STATUS),
        ConcurrentIndexRemoval(model_name='taskentity', name='task_lambda_status'),
        migrations.RenameIndex(model_name='taskentity', new_name='task_lambda_status',
                               old_name='task_lambda_status_by_id'),
        ConcurrentIndex(model_name='taskentity', index=AT_REST),
        ConcurrentIndexRemoval(model_name='taskentity', name='task_status_at_rest'),
        migrations.RenameIndex(model_name='taskentity', new_name='task_status_at_rest',
                               old_name='task_status_at_rest_by_id'),
    ]
