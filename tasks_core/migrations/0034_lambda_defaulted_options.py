"""Lambda.defaulted: the options the code left to their defaults, which every process now reads
from its own settings instead of from the row the last syncing process wrote. Existing rows
start with none listed (their columns keep meaning what they hold) until the next sync."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('tasks_core', '0033_status_indexes_by_ascending_id'),
    ]

    operations = [
        migrations.AddField(
            model_name='lambda',
            name='defaulted',
            field=models.JSONField(blank=True, default=list),
        ),
    ]
