"""Three foreign keys without a database constraint: a task's and its assoc row's lambda, and an
attempt's task. The lambdas' check locked the lambda's one row on every insert (a lock record in
the WAL each, and a multixact that every producer of the lambda shares once several insert at
once); the attempts' cost a query on every attempt written (by the statement that already holds
its task's row) and on every task pruned (retention deletes a task's attempts first). The ORM
still refuses to delete a lambda that has tasks (PROTECT) and deletes a task's attempts with it.

Each constraint is dropped in a transaction of its own (the migration is not atomic): the
table's lock is held for the drop alone, which reads no row."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    atomic = False

    dependencies = [
        ('tasks_core', '0031_latency_rollup'),
    ]

    operations = [
        migrations.AlterField(
            model_name='taskassoc',
            name='lambda_ref',
            field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='tasks_core.lambda'),
        ),
        migrations.AlterField(
            model_name='taskattempt',
            name='task',
            field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='attempt_history', to='tasks_core.taskentity'),
        ),
        migrations.AlterField(
            model_name='taskentity',
            name='lambda_ref',
            field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='tasks', to='tasks_core.lambda'),
        ),
    ]
