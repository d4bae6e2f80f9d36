"""The console's group page: counts, callbacks and members; a task's page links its group."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from tasks_core import groups
from tasks_core.scheduling import TaskRequest
from tests.factories import LambdaFactory

pytestmark = pytest.mark.django_db


def test_a_groups_page_shows_its_members_and_callbacks(admin_client: Client) -> None:
    lam = LambdaFactory(name="console.group")
    group = groups.schedule(groups.GroupRequest([TaskRequest(lam.name) for _ in range(3)],
                                                then=TaskRequest(lam.name)))
    page = admin_client.get(reverse("admin:tasks_core_taskgroup_change", args=[group.pk]))
    assert page.status_code == 200
    text = page.content.decode()
    assert f"#{group.then_id}" in text and "waiting" in text
    member = group.members.order_by("pk").first()
    assert member is not None and f"#{member.pk}" in text
    listed = admin_client.get(reverse("admin:tasks_core_taskgroup_changelist"))
    assert listed.status_code == 200
    task_page = admin_client.get(reverse("admin:tasks_core_taskentity_change", args=[member.pk]))
    assert f"group #{group.pk}" in task_page.content.decode()
