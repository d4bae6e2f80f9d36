"""Steps that resume (ctx.step): each recorded once, under the lease of the attempt that ran it."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('tasks_core', '0023_task_group_member_index'),
    ]

    operations = [
        migrations.CreateModel(
            name='TaskStep',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(max_length=200)),
                ('result', models.JSONField(blank=True, null=True)),
                ('size', models.PositiveIntegerField()),
                ('attempt', models.PositiveIntegerField()),
                ('recorded_at', models.DateTimeField()),
                ('task', models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.DO_NOTHING, related_name='steps', to='tasks_core.taskentity')),
            ],
            options={
                'ordering': ['task', 'id'],
                'constraints': [models.UniqueConstraint(fields=('task', 'name'), name='step_unique_name')],
            },
        ),
    ]
