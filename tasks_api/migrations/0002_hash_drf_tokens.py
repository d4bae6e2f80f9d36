"""Existing DRF tokens (rest_framework.authtoken) become hashed API tokens; old keys keep working.

The raw keys are then deleted from DRF's table, which the project no longer installs.
"""

from __future__ import annotations

import hashlib

from django.apps.registry import Apps
from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

DRF_TABLE = "authtoken_token"


def hash_drf_tokens(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    connection = schema_editor.connection
    if DRF_TABLE not in connection.introspection.table_names():
        return
    ApiToken = apps.get_model("tasks_api", "ApiToken")
    Team = apps.get_model("tasks_core", "Team")
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT key, user_id, created FROM {DRF_TABLE}")
        rows = cursor.fetchall()
    for key, user_id, created in rows:
        # A DRF token had no team: it goes to the user's first team, if any.
        team = Team.objects.filter(members__pk=user_id).order_by("pk").first()
        ApiToken.objects.get_or_create(
            digest=hashlib.sha256(key.encode()).hexdigest(),
            defaults={"user_id": user_id, "team": team, "name": "migrated DRF token",
                      "prefix": key[:8], "created_at": created})
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {DRF_TABLE}")


class Migration(migrations.Migration):

    dependencies = [
        ("tasks_api", "0001_api_tokens"),
        ("tasks_core", "0001_initial"),
    ]

    operations = [migrations.RunPython(hash_drf_tokens, migrations.RunPython.noop)]
