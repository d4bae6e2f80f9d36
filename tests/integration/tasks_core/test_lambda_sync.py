"""The registry's lambdas reach the store: synced on first use, scheduled through their handle."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
from django.apps import apps as django_apps
from django.apps.registry import Apps
from django.db.migrations.loader import MigrationLoader

from tasks_core import apps as apps_module
from tasks_core import atf, directory, lambda_options, lambda_sync, overrides, registry
from tasks_core.context import TaskContext
from tasks_core.exceptions import LambdaNotFound
from tasks_core.models import Lambda, TaskEntity

pytestmark = [pytest.mark.django_db]

NAME = "tests.lambda_sync.late"


@pytest.fixture
def late_lambda() -> Iterator[registry.RegisteredLambda]:
    """A lambda registered after the store was synced, so it has no row yet."""

    @atf.register(NAME, max_attempts=4)
    def late(ctx: TaskContext, payload: object) -> None:
        return None

    yield late
    registry.unregister(NAME)
    lambda_sync.sync_to_store()


def test_a_lambda_registered_but_not_yet_synced_is_synced_on_first_use(
        late_lambda: registry.RegisteredLambda) -> None:
    assert not Lambda.objects.filter(name=NAME).exists()
    info = directory.by_name(NAME)
    assert (info.name, info.max_attempts) == (NAME, 4)
    assert Lambda.objects.get(name=NAME).in_code


def test_an_unknown_lambda_is_not_synced_into_being() -> None:
    with pytest.raises(LambdaNotFound):
        directory.by_name("tests.lambda_sync.nowhere")
    assert not Lambda.objects.filter(name="tests.lambda_sync.nowhere").exists()


def test_the_handle_schedules_a_task_of_its_lambda(
        late_lambda: registry.RegisteredLambda) -> None:
    task = late_lambda.schedule({"n": 1}, priority="high")
    assert isinstance(task, TaskEntity)
    assert (task.lambda_ref.name, task.payload, task.priority) == (NAME, {"n": 1}, "high")


def test_sync_marks_rows_the_code_lost(late_lambda: registry.RegisteredLambda) -> None:
    lambda_sync.sync_to_store()
    registry.unregister(NAME)
    lambda_sync.sync_to_store()
    assert Lambda.objects.get(name=NAME).in_code is False


def test_an_option_left_to_its_default_is_read_from_each_process_s_own_settings(
        late_lambda: registry.RegisteredLambda, settings: Any) -> None:
    # Another process, whose settings differ, synced last: its defaults are in the columns.
    lambda_sync.sync_to_store()
    Lambda.objects.filter(name=NAME).update(heartbeat_timeout_s=300, backoff_cap_s=900,
                                            max_attempts=11)
    settings.ATF_HEARTBEAT_TIMEOUT_S, settings.ATF_BACKOFF_CAP_S = 7.0, 40.0
    directory.clear()
    info = directory.by_name(NAME)
    # This process's settings, for what the code left out; the code's value where it gave one.
    assert (info.heartbeat_timeout_s, info.backoff_cap_s, info.max_attempts) == (7.0, 40.0, 11)
    resolved = overrides.resolve(Lambda.objects.get(name=NAME))["heartbeat_timeout"]
    assert (resolved.value, resolved.code_value, resolved.source) == (7.0, 7.0, overrides.CODE)
    assert set(Lambda.objects.get(name=NAME).defaulted) == \
        {option.name for option in lambda_options.OPTIONS} - {"max_attempts"}


def test_each_declared_option_has_its_code_value_its_column_and_its_cached_field() -> None:
    # overrides.OPTIONS declares the options; the code's value, the Lambda column and the
    # directory's field of each must exist under the column's name
    code_fields = {f.name for f in dataclasses.fields(registry.LambdaOptions)}
    info_fields = {f.name for f in dataclasses.fields(directory.LambdaInfo)}
    columns = {f.name for f in Lambda._meta.get_fields()}
    for option in overrides.OPTIONS:
        assert option.column in code_fields & info_fields & columns, option.name


def _migrated_to(migration: str | None) -> Apps:
    """The models as `migrate` leaves them at tasks_core's `migration` (None: the latest)."""
    loader = MigrationLoader(None, ignore_no_migrations=True)
    return loader.project_state(("tasks_core", migration) if migration else None).apps


def test_a_database_migrated_back_is_left_alone_until_it_is_migrated_forward_again(
        late_lambda: registry.RegisteredLambda, caplog: pytest.LogCaptureFixture) -> None:
    # `migrate tasks_core 0018` (a rolled-back deploy) leaves tables without later columns:
    # the sync's queries would fail on them, so it waits for the next `migrate`.
    tasks_core_app = django_apps.get_app_config("tasks_core")
    apps_module._sync_lambdas(tasks_core_app, using="default",
                              apps=_migrated_to("0018_outcome_rollup"))
    assert not Lambda.objects.filter(name=NAME).exists()
    assert "not at tasks_core's latest migration" in caplog.text

    apps_module._sync_lambdas(tasks_core_app, using="default", apps=_migrated_to(None))
    assert Lambda.objects.filter(name=NAME).exists()
