"""task_succeeded_by: the successes each worker ran, now that a success writes no attempt row
(tasks_core.attempt_history) for attempt_worker to find it by. Built CONCURRENTLY, so that a
store with millions of tasks keeps taking writes."""

from django.db import migrations, models

from tasks_core.concurrent_index import ConcurrentIndex


class Migration(migrations.Migration):

    atomic = False  # CREATE INDEX CONCURRENTLY cannot run in a transaction

    dependencies = [
        ('tasks_core', '0034_lambda_defaulted_options'),
    ]

    operations = [
        ConcurrentIndex(
            model_name='taskentity',
            index=models.Index(condition=models.Q(('status', 'success')), fields=['worker'],
                               name='task_succeeded_by'),
        ),
    ]
