"""A group's members in order (its counts, its callback's results): members only.

Built CONCURRENTLY on PostgreSQL (tasks_core.concurrent_index), so that a store with millions
of tasks keeps taking writes while it is built; other databases build it as usual.
"""

from django.db import migrations, models

from tasks_core.concurrent_index import ConcurrentIndex

INDEX = models.Index(fields=["group", "id"], name="task_group_member",
                     condition=models.Q(group__isnull=False))


class Migration(migrations.Migration):

    atomic = False  # CREATE INDEX CONCURRENTLY cannot run in a transaction

    dependencies = [
        ('tasks_core', '0022_groups'),
    ]

    operations = [
        ConcurrentIndex(model_name='taskentity', index=INDEX),
    ]
