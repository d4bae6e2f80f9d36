"""Groups of tasks with callbacks (atf.group): the group row, and the member's group column
(nullable, so adding it rewrites no row)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('tasks_core', '0021_flow_indexes'),
    ]

    operations = [
        migrations.CreateModel(
            name='TaskGroup',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('status', models.CharField(choices=[('running', 'Running'), ('succeeded', 'Succeeded'), ('failed', 'Failed')], default='running', max_length=16)),
                ('total', models.PositiveIntegerField()),
                ('succeeded', models.PositiveIntegerField(default=0)),
                ('failed', models.PositiveIntegerField(default=0)),
                ('created_at', models.DateTimeField()),
                ('finished_at', models.DateTimeField(blank=True, null=True)),
                ('on_failure', models.ForeignKey(blank=True, db_constraint=False, null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+', to='tasks_core.taskentity')),
                ('team', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='task_groups', to='tasks_core.team')),
                ('then', models.ForeignKey(blank=True, db_constraint=False, null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+', to='tasks_core.taskentity')),
            ],
            options={
                'verbose_name': 'task group',
            },
        ),
        migrations.AddField(
            model_name='taskentity',
            name='group',
            field=models.ForeignKey(blank=True, db_constraint=False, db_index=False, null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name='members', to='tasks_core.taskgroup'),
        ),
    ]
