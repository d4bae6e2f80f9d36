"""The assoc rows' trigger index across every lambda goes: the consumer's soonest trigger is
read per lambda and priority from assoc_lambda_priority_due, which every pass reads anyway, so
each transition of a task writes one index entry fewer (about 150 bytes of WAL a task).
Dropped CONCURRENTLY on PostgreSQL (tasks_core.concurrent_index), so that a store with
millions of tasks keeps taking writes."""

from django.db import migrations

from tasks_core.concurrent_index import ConcurrentIndexRemoval


class Migration(migrations.Migration):

    atomic = False  # DROP INDEX CONCURRENTLY cannot run in a transaction

    dependencies = [
        ('tasks_core', '0029_flow_start_at'),
    ]

    operations = [
        ConcurrentIndexRemoval(model_name='taskassoc', name='assoc_due'),
    ]
