"""Periodic-task names are unique within a team: each row keeps its lambda's team."""

from __future__ import annotations

from typing import Any

import django.db.models.deletion
from django.db import migrations, models
from django.db.models import OuterRef, Subquery


def fill_teams(apps: Any, schema_editor: Any) -> None:
    periodic_task = apps.get_model("tasks_core", "PeriodicTask")
    lambda_model = apps.get_model("tasks_core", "Lambda")
    team_of = lambda_model.objects.filter(pk=OuterRef("lambda_ref_id")).values("team_id")
    periodic_task.objects.update(team_id=Subquery(team_of))


class Migration(migrations.Migration):

    dependencies = [
        ("tasks_core", "0011_worker_credential"),
    ]

    operations = [
        migrations.AddField(
            model_name="periodictask",
            name="team",
            field=models.ForeignKey(null=True, on_delete=django.db.models.deletion.CASCADE,
                                    related_name="periodic_tasks", to="tasks_core.team"),
        ),
        migrations.RunPython(fill_teams, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="periodictask",
            name="team",
            field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE,
                                    related_name="periodic_tasks", to="tasks_core.team"),
        ),
        migrations.AlterField(
            model_name="periodictask",
            name="name",
            field=models.CharField(max_length=200),
        ),
        migrations.AddConstraint(
            model_name="periodictask",
            constraint=models.UniqueConstraint(fields=("team", "name"),
                                               name="periodic_unique_name_per_team"),
        ),
    ]
