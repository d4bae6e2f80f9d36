"""A group member's place in its group (`group_position`, from 1), filled in for the members of
groups made before it in id order (their order until now); a group's own idempotency key,
unique in its team."""

from typing import Any

from django.db import migrations, models

#: Members whose position one statement sets.
BATCH = 1000


def number_members(apps: Any, schema_editor: Any) -> None:
    """Give each existing member its place in its group: its rank by id."""
    task = apps.get_model("tasks_core", "TaskEntity")
    members = task.objects.filter(group__isnull=False, group_position__isnull=True)
    for group_id in members.values_list("group_id", flat=True).distinct().order_by():
        ids = list(task.objects.filter(group_id=group_id).order_by("pk")
                   .values_list("pk", flat=True))
        for start in range(0, len(ids), BATCH):
            task.objects.bulk_update(
                [task(pk=pk, group_position=start + offset + 1)
                 for offset, pk in enumerate(ids[start:start + BATCH])], ["group_position"])


class Migration(migrations.Migration):

    dependencies = [
        ('tasks_core', '0026_task_trace'),
    ]

    operations = [
        migrations.AddField(
            model_name='taskentity',
            name='group_position',
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.RunPython(number_members, migrations.RunPython.noop, elidable=True),
        migrations.AddField(
            model_name='taskgroup',
            name='idempotency_key',
            field=models.CharField(blank=True, max_length=255, null=True),
        ),
        migrations.AddConstraint(
            model_name='taskgroup',
            constraint=models.UniqueConstraint(condition=models.Q(('idempotency_key__isnull', False)), fields=('team', 'idempotency_key'), name='task_group_unique_idempotency_key'),
        ),
    ]
