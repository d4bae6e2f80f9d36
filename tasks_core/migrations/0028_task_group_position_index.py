"""A group's members in their order (its counts, its callback's results), members only: the
index by position replaces the one by id. Built CONCURRENTLY on PostgreSQL
(tasks_core.concurrent_index), so that a store with millions of tasks keeps taking writes."""

from django.db import migrations, models

from tasks_core.concurrent_index import ConcurrentIndex

INDEX = models.Index(fields=["group", "group_position"], name="task_group_position",
                     condition=models.Q(group__isnull=False))


class Migration(migrations.Migration):

    atomic = False  # CREATE INDEX CONCURRENTLY cannot run in a transaction

    dependencies = [
        ('tasks_core', '0027_group_member_positions'),
    ]

    operations = [
        ConcurrentIndex(model_name='taskentity', index=INDEX),
        migrations.RemoveIndex(model_name='taskentity', name='task_group_member'),
    ]
