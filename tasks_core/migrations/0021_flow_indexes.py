"""Flow control's partial indexes on the task table, built without locking it (CONCURRENTLY on
PostgreSQL, a plain index elsewhere). They hold only tasks a limit holds back and debounced
tasks still waiting: tasks of lambdas without limits never write them."""

from django.db import migrations, models

from tasks_core.concurrent_index import ConcurrentIndex


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
