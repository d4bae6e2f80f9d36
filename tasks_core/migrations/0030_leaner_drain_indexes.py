"""Indexes that the drain's every transition wrote and few reads need: the assoc rows' trigger
index across every lambda goes (the consumer's soonest trigger is read per lambda and priority
from assoc_lambda_priority_due, which every pass reads anyway), and the index of tasks by
status across lambdas keeps only the statuses a task rests in (task_status_at_rest), so that
enqueued, claimed, processing and success write no entry there. Built and dropped
CONCURRENTLY on PostgreSQL (tasks_core.concurrent_index), so that a store with millions of
tasks keeps taking writes."""

from django.db import migrations, models

from tasks_core.concurrent_index import ConcurrentIndex, ConcurrentIndexRemoval

AT_REST = models.Index(fields=["status", "-id"], name="task_status_at_rest",
                       condition=~models.Q(status__in=["enqueued", "claimed", "processing",
                                                       "success"]))


class Migration(migrations.Migration):

    atomic = False  # CREATE and DROP INDEX CONCURRENTLY cannot run in a transaction

    dependencies = [
        ('tasks_core', '0029_flow_start_at'),
    ]

    operations = [
        ConcurrentIndexRemoval(model_name='taskassoc', name='assoc_due'),
        ConcurrentIndex(model_name='taskentity', index=AT_REST),
        ConcurrentIndexRemoval(model_name='taskentity', name='task_status'),
    ]
