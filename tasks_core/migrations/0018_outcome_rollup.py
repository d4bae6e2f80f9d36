"""The rollup of finished outcomes (tasks_core.outcomes), so that the counts of /metrics, the
lambdas list and the dashboard never read the history.

The new tables are filled from the tasks already finished (one read of the history, which
blocks no writer): the store stays writable throughout. No index is added to the task table:
live tasks and dead letters are counted through ranges of task_status, and a partial index of
those rows would cost every drained task ~250 bytes of WAL more.
"""

from datetime import UTC, timedelta

import django.db.models.deletion
from django.db import migrations, models, transaction
from django.db.models import Count
from django.db.models.functions import TruncMinute
from django.utils import timezone

FINAL = ["cancelled", "dead", "dropped", "fatal_failure", "success"]
#: As tasks_core.outcomes.SETTLE_S and MINUTES_KEPT_S when this migration was written.
SETTLE = timedelta(seconds=10)
MINUTES_KEPT = timedelta(hours=25)


def fill_rollup(apps, schema_editor) -> None:
    """Fold every task finished until SETTLE ago into the totals (and the last MINUTES_KEPT
    into minute rows), and mark the rollup as reaching there: the consumers go on from it."""
    alias = schema_editor.connection.alias
    task = apps.get_model("tasks_core", "TaskEntity")
    total = apps.get_model("tasks_core", "OutcomeTotal")
    minute = apps.get_model("tasks_core", "OutcomeMinute")
    fold = apps.get_model("tasks_core", "OutcomeFold")
    until = timezone.now() - SETTLE
    finished = task.objects.using(alias).filter(status__in=FINAL, finished_at__lt=until)
    with transaction.atomic(using=alias):
        total.objects.using(alias).bulk_create(
            total(lambda_ref_id=lambda_id, status=status, finished=n)
            for lambda_id, status, n in finished.order_by()
            .values_list("lambda_ref_id", "status").annotate(n=Count("pk")))
        minute.objects.using(alias).bulk_create(
            minute(lambda_ref_id=lambda_id, status=status, minute=at, finished=n)
            for lambda_id, status, at, n in finished.filter(finished_at__gte=until - MINUTES_KEPT)
            .annotate(at=TruncMinute("finished_at", tzinfo=UTC)).order_by()
            .values_list("lambda_ref_id", "status", "at").annotate(n=Count("pk")))
        fold.objects.using(alias).create(pk=1, folded_until=until)


def empty_rollup(apps, schema_editor) -> None:
    for name in ("OutcomeTotal", "OutcomeMinute", "OutcomeFold"):
        apps.get_model("tasks_core", name).objects.using(schema_editor.connection.alias).delete()


class Migration(migrations.Migration):

    dependencies = [
        ('tasks_core', '0017_task_held_index'),
    ]

    operations = [
        migrations.CreateModel(
            name='OutcomeFold',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('folded_until', models.DateTimeField()),
            ],
        ),
        migrations.CreateModel(
            name='OutcomeMinute',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('status', models.CharField(choices=[('cancelled', 'cancelled'), ('dead', 'dead'), ('dropped', 'dropped'), ('fatal_failure', 'fatal_failure'), ('success', 'success')], max_length=16)),
                ('minute', models.DateTimeField()),
                ('finished', models.BigIntegerField(default=0)),
            ],
        ),
        migrations.CreateModel(
            name='OutcomeTotal',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('status', models.CharField(choices=[('cancelled', 'cancelled'), ('dead', 'dead'), ('dropped', 'dropped'), ('fatal_failure', 'fatal_failure'), ('success', 'success')], max_length=16)),
                ('finished', models.BigIntegerField(default=0)),
            ],
        ),
        migrations.AddField(
            model_name='outcomeminute',
            name='lambda_ref',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='tasks_core.lambda'),
        ),
        migrations.AddField(
            model_name='outcometotal',
            name='lambda_ref',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='tasks_core.lambda'),
        ),
        migrations.AddIndex(
            model_name='outcomeminute',
            index=models.Index(fields=['minute'], name='outcome_minute'),
        ),
        migrations.AddConstraint(
            model_name='outcomeminute',
            constraint=models.UniqueConstraint(fields=('lambda_ref', 'status', 'minute'), name='outcome_minute_unique'),
        ),
        migrations.AddConstraint(
            model_name='outcometotal',
            constraint=models.UniqueConstraint(fields=('lambda_ref', 'status'), name='outcome_total_unique'),
        ),
        migrations.RunPython(fill_rollup, empty_rollup),
    ]
