# The option columns take their defaults, validators and help text from tasks_core.lambda_options
# (no change to the schema).

import tasks_core.lambda_options
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('tasks_core', '0015_leaner_hot_rows'),
    ]

    operations = [
        migrations.AlterField(
            model_name='lambda',
            name='backoff_base_s',
            field=models.FloatField(default=tasks_core.lambda_options.DeclaredDefault('backoff_base'), help_text="seconds of the first retry's backoff ceiling", validators=[tasks_core.lambda_options.DeclaredBounds('backoff_base')]),
        ),
        migrations.AlterField(
            model_name='lambda',
            name='backoff_cap_s',
            field=models.FloatField(default=tasks_core.lambda_options.DeclaredDefault('backoff_cap'), help_text='most seconds of backoff before a retry', validators=[tasks_core.lambda_options.DeclaredBounds('backoff_cap')]),
        ),
        migrations.AlterField(
            model_name='lambda',
            name='heartbeat_timeout_s',
            field=models.FloatField(default=tasks_core.lambda_options.DeclaredDefault('heartbeat_timeout'), help_text='seconds a running task may go without a heartbeat', validators=[tasks_core.lambda_options.DeclaredBounds('heartbeat_timeout')]),
        ),
        migrations.AlterField(
            model_name='lambda',
            name='max_attempts',
            field=models.PositiveIntegerField(default=tasks_core.lambda_options.DeclaredDefault('max_attempts'), help_text='attempts before a task is dead', validators=[tasks_core.lambda_options.DeclaredBounds('max_attempts')]),
        ),
        migrations.AlterField(
            model_name='lambda',
            name='quota_per_s',
            field=models.FloatField(blank=True, default=tasks_core.lambda_options.DeclaredDefault('quota'), help_text='tasks per second the consumer may enqueue (none: no limit)', null=True, validators=[tasks_core.lambda_options.DeclaredBounds('quota')]),
        ),
        migrations.AlterField(
            model_name='lambda',
            name='timeout_s',
            field=models.FloatField(blank=True, default=tasks_core.lambda_options.DeclaredDefault('timeout'), help_text='seconds one attempt may run (0: no limit)', null=True, validators=[tasks_core.lambda_options.DeclaredBounds('timeout')]),
        ),
    ]
