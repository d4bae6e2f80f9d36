"""Delivery latencies in the rollup of outcomes (tasks_core.outcomes): per lambda and minute of
their start, first attempts counted per bucket of a log scale (tasks_core.latency_buckets), so
that the latency percentiles of the dashboard, /api/v1/stats/ and /metrics read no task rows.

The new table is filled from the tasks the rollup already holds that finished in the last
MINUTES_KEPT before its mark (one read of that range of the (status, finished_at) index, which
blocks no writer); the consumers' folds go on from the mark.
"""

from datetime import timedelta

import django.db.models.deletion
from django.db import migrations, models, transaction

from tasks_core.latency_buckets import by_lambda_minute, grouped

FINAL = ["cancelled", "dead", "dropped", "fatal_failure", "success"]
#: As tasks_core.outcomes.MINUTES_KEPT_S when this migration was written.
MINUTES_KEPT = timedelta(hours=25)


def fill_latencies(apps, schema_editor) -> None:
    """Count the latencies of the first attempts that finished in the last MINUTES_KEPT before
    the rollup's mark (none before the first fold: the folds will count them)."""
    alias = schema_editor.connection.alias
    task = apps.get_model("tasks_core", "TaskEntity")
    fold = apps.get_model("tasks_core", "OutcomeFold")
    latency_minute = apps.get_model("tasks_core", "LatencyMinute")
    with transaction.atomic(using=alias):
        until = fold.objects.using(alias).filter(pk=1).values_list("folded_until", flat=True).first()
        if until is None:
            return
        folded = task.objects.using(alias).filter(
            status__in=FINAL, finished_at__gte=until - MINUTES_KEPT, finished_at__lt=until)
        latency_minute.objects.using(alias).bulk_create(
            latency_minute(lambda_ref_id=lambda_id, minute=minute,
                           buckets=latencies.to_json(), sum_s=latencies.sum_s)
            for (lambda_id, minute), latencies in by_lambda_minute(grouped(folded)).items())


def empty_latencies(apps, schema_editor) -> None:
    apps.get_model("tasks_core", "LatencyMinute").objects.using(
        schema_editor.connection.alias).delete()


class Migration(migrations.Migration):

    dependencies = [
        ('tasks_core', '0030_leaner_drain_indexes'),
    ]

    operations = [
        migrations.CreateModel(
            name='LatencyMinute',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('minute', models.DateTimeField()),
                ('buckets', models.JSONField(default=dict)),
                ('sum_s', models.FloatField(default=0.0)),
                ('lambda_ref', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='tasks_core.lambda')),
            ],
            options={
                'indexes': [models.Index(fields=['minute'], name='latency_minute')],
                'constraints': [models.UniqueConstraint(fields=('lambda_ref', 'minute'), name='latency_minute_unique')],
            },
        ),
        migrations.RunPython(fill_latencies, empty_latencies),
    ]
