"""Progress that a running task reports (ctx.progress): one row per task that reported."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('tasks_core', '0024_task_steps'),
    ]

    operations = [
        migrations.CreateModel(
            name='TaskProgress',
            fields=[
                ('task', models.OneToOneField(db_constraint=False, on_delete=django.db.models.deletion.DO_NOTHING, primary_key=True, related_name='progress', serialize=False, to='tasks_core.taskentity')),
                ('done', models.FloatField()),
                ('total', models.FloatField(blank=True, null=True)),
                ('note', models.CharField(blank=True, default='', max_length=200)),
                ('updated_at', models.DateTimeField()),
            ],
        ),
    ]
