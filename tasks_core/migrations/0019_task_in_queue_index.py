"""The index behind the queues' age (atf_queue_oldest_age_seconds): enqueued tasks only.

Built CONCURRENTLY on PostgreSQL (tasks_core.concurrent_index), so that a store with millions
of tasks keeps taking writes while it is built; other databases build it as usual.
"""

from django.db import migrations, models

from tasks_core.concurrent_index import ConcurrentIndex

INDEX = models.Index(fields=["lambda_ref", "priority", "enqueued_at"], name="task_in_queue",
                     condition=models.Q(status="enqueued"))


class Migration(migrations.Migration):

    atomic = False  # CREATE INDEX CONCURRENTLY cannot run in a transaction

    dependencies = [
        ('tasks_core', '0018_outcome_rollup'),
    ]

    operations = [
        ConcurrentIndex(model_name='taskentity', index=INDEX),
    ]
