"""Operator commands: atf_gate, atf_dlq, atf_status, atf_prune — happy paths and clear errors."""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
from datetime import timedelta
from typing import Any

import pytest
import redis
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from tasks_core import queues
from tasks_core.contrib import cli
from tasks_core.models import Collection, Lambda, TaskEntity, Worker
from tasks_core.queues import Message
from tasks_core.states import TaskStatus
from tests.conftest import ROOT, subprocess_env
from tests.factories import LambdaFactory, TaskFactory

pytestmark = [pytest.mark.django_db]

ERROR = {"type": "RuntimeError", "message": "smtp down\nsecond line", "traceback": "..."}


class Terminal(io.StringIO):
    """Captured output that says it is a terminal, so progress bars draw."""

    def isatty(self) -> bool:
        return True


def run(*args: str, **options: Any) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO(), **options)
    return out.getvalue()


@pytest.fixture
def mailer() -> Lambda:
    return LambdaFactory(name="tests.mailer")


def dead(lam: Lambda, collection: str = "default", **fields: Any) -> TaskEntity:
    return TaskFactory(lambda_ref=lam, collection=collection, status=TaskStatus.DEAD,
                       attempts=3, finished_at=timezone.now(), last_error=ERROR, **fields)


def status(task: TaskEntity) -> str:
    return TaskEntity.objects.get(pk=task.pk).status


# --- argument types ----------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected_s"), [
    ("90", 90.0), ("30s", 30.0), ("15m", 900.0), ("1h30m", 5400.0), ("7d", 604800.0),
    ("2w", 1209600.0), ("1.5h", 5400.0), (" 7D ", 604800.0),
])
def test_durations(text: str, expected_s: float) -> None:
    assert cli.duration_s(text) == expected_s


@pytest.mark.parametrize("text", ["", "7 days", "1h x", "h", "-5", "0s", "1y"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        cli.duration_s(text)


def test_moments() -> None:
    now = timezone.now()
    assert cli.moment("2h", now=now) == now + timedelta(hours=2)
    assert cli.moment("2026-01-31T18:00:00+01:00").isoformat() == "2026-01-31T18:00:00+01:00"
    assert cli.moment("2026-01-31 18:00").tzinfo is not None  # naive: the current time zone


# --- atf_gate ----------------------------------------------------------------------------


def test_gate_pause_with_until_then_open(mailer: Lambda) -> None:
    # When an operator pauses a lambda for 30 minutes
    out = run("atf_gate", "tests.mailer", "pause", "--until", "30m")
    # Then its gate is paused until then
    mailer.refresh_from_db()
    assert mailer.gate == "paused"
    left = mailer.gate_until - timezone.now()
    assert timedelta(minutes=29) < left <= timedelta(minutes=30)
    assert out.startswith("tests.mailer: paused until ")
    # When it is opened again, Then the gate is open with no time limit
    assert run("atf_gate", "tests.mailer", "open").strip() == "tests.mailer: open"
    mailer.refresh_from_db()
    assert (mailer.gate, mailer.gate_until) == ("open", None)


def test_gate_drop_one_collection_until_an_iso_time(mailer: Lambda) -> None:
    until = (timezone.now() + timedelta(days=1)).replace(microsecond=0)
    out = run("atf_gate", "tests.mailer/marketing", "drop", "--until", until.isoformat())
    gate = Collection.objects.get(lambda_ref=mailer, name="marketing")
    assert (gate.gate, gate.gate_until) == ("dropped", until)
    assert out.strip() == f"tests.mailer/marketing: dropped until {until.isoformat()}"
    mailer.refresh_from_db()
    assert mailer.gate == "open"


@pytest.mark.parametrize(("args", "message"), [
    (["tests.nope", "pause"], "unknown lambda 'tests.nope'"),
    (["tests.mailer", "shut"], "invalid choice: 'shut'"),
    (["tests.mailer/", "pause"], "write LAMBDA or LAMBDA/COLLECTION"),
    (["tests.mailer", "pause", "--until", "soon"], "neither an ISO 8601 time"),
    (["tests.mailer", "pause", "--until", "2001-01-01T00:00:00Z"], "must be in the future"),
    (["tests.mailer", "open", "--until", "1h"], "until goes with a paused or dropped gate"),
])
def test_gate_errors(mailer: Lambda, args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        run("atf_gate", *args)
    mailer.refresh_from_db()
    assert mailer.gate == "open"


# --- atf_dlq -----------------------------------------------------------------------------


def test_dlq_list_shows_dead_tasks_with_their_error(mailer: Lambda) -> None:
    # Given two dead tasks and one that succeeded
    first, second = dead(mailer), dead(mailer, "marketing")
    TaskFactory(lambda_ref=mailer, status=TaskStatus.SUCCESS)
    # When listing the dead-letter queue
    out = run("atf_dlq", "list")
    # Then both dead tasks show, with the first line of their error, and a count
    lines = out.splitlines()
    assert lines[0].split() == ["ID", "LAMBDA", "COLLECTION", "ATTEMPTS", "DIED", "LAST",
                                "ERROR"]
    assert [line.split()[0] for line in lines[1:3]] == [str(first.pk), str(second.pk)]
    assert "RuntimeError: smtp down" in lines[1]
    assert "second line" not in out
    assert lines[-1] == "2 dead task(s)"
    # And filters narrow it
    filtered = run("atf_dlq", "list", "--lambda", "tests.mailer", "--collection", "marketing")
    assert filtered.splitlines()[-1] == "1 dead task(s)"
    assert run("atf_dlq", "list", "--limit", "1").splitlines()[-1] == "2 dead task(s), 1 shown"


def test_dlq_requeue_by_ids(mailer: Lambda) -> None:
    # Given a dead task and a successful one
    task = dead(mailer)
    other = TaskFactory(lambda_ref=mailer, status=TaskStatus.SUCCESS)
    # When both ids are requeued
    out = run("atf_dlq", "requeue", "--ids", f"{task.pk},{other.pk}")
    # Then only the dead one goes back to new, and the operator is told
    assert out.strip() == "requeued 1 of 2 dead task(s) (the others are not dead)"
    assert (status(task), status(other)) == ("new", "success")
    assert TaskEntity.objects.get(pk=task.pk).attempts == 0


def test_dlq_requeue_and_discard_by_lambda_and_collection(mailer: Lambda) -> None:
    # Given dead tasks in two collections, and a dead task of another lambda
    marketing = [dead(mailer, "marketing") for _ in range(3)]
    billing = dead(mailer, "billing")
    elsewhere = dead(LambdaFactory(name="tests.other"))
    # When requeueing one collection, with a progress bar on a terminal
    err = Terminal()
    call_command("atf_dlq", "requeue", "--lambda", "tests.mailer", "--collection", "marketing",
                 stdout=io.StringIO(), stderr=err)
    # Then exactly that collection is requeued
    assert [status(t) for t in marketing] == ["new"] * 3
    assert (status(billing), status(elsewhere)) == ("dead", "dead")
    assert "[##############################] 100% 3/3" in err.getvalue()
    # When discarding the lambda's dead tasks, Then they are gone and nothing else
    assert run("atf_dlq", "discard", "--lambda", "tests.mailer").strip() == (
        "discarded 1 dead task(s)")
    assert not TaskEntity.objects.filter(pk=billing.pk).exists()
    assert status(elsewhere) == "dead"


@pytest.mark.parametrize(("args", "message"), [
    (["requeue"], "Name the dead tasks: ids, or a lambda"),
    (["discard", "--lambda", "tests.mailer", "--ids", "1"], "Name the dead tasks"),
    (["discard", "--collection", "x"], "Name the dead tasks"),
    (["list", "--collection", "x"], "A collection goes with a lambda"),
    (["list", "--lambda", "tests.nope"], "Unknown lambda 'tests.nope'"),
    (["requeue", "--ids", "1,two"], "give task ids as 1,2,3"),
    (["purge"], "invalid choice: 'purge'"),
])
def test_dlq_errors(mailer: Lambda, args: list[str], message: str) -> None:
    task = dead(mailer)
    with pytest.raises(CommandError, match=message):
        run("atf_dlq", *args)
    assert status(task) == "dead"


# --- atf_tasks ---------------------------------------------------------------------------


def test_tasks_cancel_cancels_a_waiting_task_and_asks_a_running_ones_worker(
        mailer: Lambda) -> None:
    waiting = TaskFactory(lambda_ref=mailer)
    running = TaskFactory(lambda_ref=mailer, status=TaskStatus.PROCESSING)
    out = run("atf_tasks", "cancel", f"{waiting.pk},{running.pk}")
    assert out.splitlines() == [f"task {waiting.pk}: cancelled",
                                f"task {running.pk}: running; its worker is asked to stop it"]
    assert (status(waiting), status(running)) == ("cancelled", "processing")
    assert TaskEntity.objects.get(pk=running.pk).cancel_requested_at is not None


@pytest.mark.parametrize(("args", "message"), [
    (["cancel", "999999"], "task 999999: "),
    (["cancel", "x"], "give task ids as 1,2,3"),
    (["stop", "1"], "invalid choice: 'stop'"),
])
def test_tasks_errors(args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        run("atf_tasks", *args)


def test_tasks_cancel_of_a_finished_task_is_a_one_line_error(mailer: Lambda) -> None:
    task = dead(mailer)
    with pytest.raises(CommandError, match=f"task {task.pk}: a task in status dead cannot"):
        run("atf_tasks", "cancel", str(task.pk))
    assert status(task) == "dead"


# --- atf_status --------------------------------------------------------------------------


def test_status_once_shows_queues_counts_and_workers(mailer: Lambda,
                                                     redis_client: redis.Redis) -> None:
    # Given tasks in several statuses, two messages queued at high priority, and a worker
    for task_status in (TaskStatus.NEW, TaskStatus.NEW, TaskStatus.PROCESSING, TaskStatus.DEAD):
        TaskFactory(lambda_ref=mailer, status=task_status)
    backend = queues.backend()
    backend.push(backend.queue_name("tests.mailer", "high"),
                 [Message(task_id=1, lease=1), Message(task_id=2, lease=1)])
    backend.close()
    now = timezone.now()
    Worker.objects.create(worker_id="host-1:42", host="host-1", pid=42,
                          lambdas=["tests.mailer"], threads=8, started_at=now, last_seen=now)
    # When the status is printed once
    out = run("atf_status", "--once")
    # Then the lambda's row shows its queue depths and counts, and the worker is listed
    row = next(line for line in out.splitlines() if line.startswith("tests.mailer"))
    assert row.split()[:6] == ["tests.mailer", "2/0/0", "2", "0", "0", "1"]
    assert "live workers: 1" in out
    assert "host-1:42" in out and "tests.mailer" in out
    assert "QUEUED (high/default/low)" in out


def test_status_can_show_one_lambda(mailer: Lambda, redis_client: redis.Redis) -> None:
    TaskFactory(lambda_ref=LambdaFactory(name="tests.other"))
    TaskFactory(lambda_ref=mailer)
    out = run("atf_status", "--once", "--lambda", "tests.mailer")
    assert "tests.mailer" in out
    assert "tests.other" not in out


@pytest.mark.parametrize(("args", "message"), [
    (["--lambda", "tests.nope"], "unknown lambda"),
    (["--interval", "0"], "more than zero"),
])
def test_status_errors(mailer: Lambda, args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        run("atf_status", "--once", *args)


# --- atf_prune ---------------------------------------------------------------------------


def test_prune_deletes_only_old_finished_tasks(mailer: Lambda) -> None:
    # Given finished tasks 10 days old, finished ones 1 hour old, and an unfinished old one
    now = timezone.now()
    old = [TaskFactory(lambda_ref=mailer, status=s, finished_at=now - timedelta(days=10))
           for s in (TaskStatus.SUCCESS, TaskStatus.DEAD, TaskStatus.CANCELLED)]
    young = TaskFactory(lambda_ref=mailer, status=TaskStatus.SUCCESS,
                        finished_at=now - timedelta(hours=1))
    waiting = TaskFactory(lambda_ref=mailer, run_at=now - timedelta(days=30))
    # When a dry run looks first
    assert run("atf_prune", "--older-than", "7d", "--dry-run").strip() == (
        "3 finished task(s) older than 7 days would be deleted")
    assert TaskEntity.objects.count() == 5
    # When pruning in batches of two, with a progress bar on a terminal
    out, err = io.StringIO(), Terminal()
    call_command("atf_prune", "--older-than", "7d", "--batch-size", "2", stdout=out, stderr=err)
    # Then only the old finished tasks are gone
    assert out.getvalue().strip() == "deleted 3 finished task(s) older than 7 days"
    assert "pruning [" in err.getvalue() and "3/3" in err.getvalue()
    assert set(TaskEntity.objects.values_list("pk", flat=True)) == {young.pk, waiting.pk}
    assert not TaskEntity.objects.filter(pk__in=[t.pk for t in old]).exists()


def test_prune_defaults_to_the_retention_setting(mailer: Lambda, settings: Any) -> None:
    settings.ATF_RETENTION_S = 3600
    TaskFactory(lambda_ref=mailer, status=TaskStatus.SUCCESS,
                finished_at=timezone.now() - timedelta(hours=2))
    assert run("atf_prune").strip() == "deleted 1 finished task(s) older than 3600s"


@pytest.mark.parametrize(("args", "message"), [
    (["--older-than", "a week"], "is not a duration"),
    (["--older-than", "0"], "more than zero"),
    (["--older-than", "7d", "--batch-size", "0"], "--batch-size must be between"),
])
def test_prune_errors(args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        run("atf_prune", *args)


def test_prune_without_age_when_retention_is_off(settings: Any) -> None:
    settings.ATF_RETENTION_S = 0
    with pytest.raises(CommandError, match="give --older-than"):
        run("atf_prune")


# --- from a shell ------------------------------------------------------------------------


@pytest.mark.parametrize("command",
                         ["atf_gate", "atf_dlq", "atf_status", "atf_prune", "atf_lambda"])
def test_each_command_has_help(command: str) -> None:
    done = subprocess.run([sys.executable, str(ROOT / "manage.py"), command, "--help"],
                          cwd=ROOT, env=subprocess_env(), capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout and len(done.stdout) > 300


def test_an_error_exits_non_zero_with_one_clear_line() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "manage.py"), "atf_gate", "tests.nope",
                           "pause"], cwd=ROOT, env=subprocess_env(), capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert done.stderr.strip() == "CommandError: unknown lambda 'tests.nope'"
