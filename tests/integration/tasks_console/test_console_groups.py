"""The console's group page (counts, callbacks, members); a task's page links its group and
shows its progress and steps."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from tasks_core import atf, groups
from tasks_core.models import TaskStep
from tasks_core.scheduling import TaskRequest
from tasks_core.store import progress
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


def test_a_tasks_page_and_the_task_list_show_its_progress_and_steps(
        admin_client: Client) -> None:
    lam = LambdaFactory(name="console.steps")
    task = atf.schedule(lam.name)
    now = timezone.now()
    progress.report(task.pk, done=3, total=8, note="resizing", now=now)
    TaskStep.objects.create(task=task, name="charge", result={"ok": True}, size=11, attempt=1,
                            recorded_at=now)
    page = admin_client.get(reverse("admin:tasks_core_taskentity_change", args=[task.pk]))
    text = page.content.decode()
    assert '<progress value="3" max="8">' in text and "resizing" in text
    assert "charge — attempt 1" in text and "11 bytes" in text
    listed = admin_client.get(reverse("admin:tasks_core_taskentity_changelist"))
    assert listed.status_code == 200 and "3/8 resizing" in listed.content.decode()


def test_a_groups_page_lists_its_members_in_their_order(admin_client: Client) -> None:
    # Given a group whose second member is a task its key named, older than the first
    lam = LambdaFactory(name="console.keyed")
    older = atf.schedule(lam.name, idempotency_key="older")
    group = atf.group([atf.call(lam.name), atf.call(lam.name, idempotency_key="older")],
                      idempotency_key="album")
    first = group.members.exclude(pk=older.pk).get()
    page = admin_client.get(reverse("admin:tasks_core_taskgroup_change", args=[group.pk]))
    text = page.content.decode()
    # Then the page lists them in the group's order, not their ids', and shows the group's key
    assert text.index(f"#{first.pk}<") < text.index(f"#{older.pk}<") and "album" in text
