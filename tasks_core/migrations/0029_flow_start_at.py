"""The rate limits' start log by age alone: the consumer prunes what no window counts
(tasks_core.flow_starts) without reading the rows it keeps."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('tasks_core', '0028_task_group_position_index'),
    ]

    operations = [
        migrations.AddIndex(
            model_name='flowstart',
            index=models.Index(fields=['at'], name='flow_start_at'),
        ),
    ]
