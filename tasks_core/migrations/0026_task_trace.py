"""The trace context a task was scheduled in (tasks_core.tracing): one row per traced task."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('tasks_core', '0025_task_progress'),
    ]

    operations = [
        migrations.CreateModel(
            name='TaskTrace',
            fields=[
                ('task', models.OneToOneField(db_constraint=False, on_delete=django.db.models.deletion.DO_NOTHING, primary_key=True, related_name='trace', serialize=False, to='tasks_core.taskentity')),
                ('traceparent', models.CharField(max_length=55)),
                ('tracestate', models.CharField(blank=True, default='', max_length=512)),
            ],
        ),
    ]
