"""`manage.py atf_tasks cancel ID[,ID...]`: act on single tasks by id."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from tasks_core import operations
from tasks_core.access import EVERY_TEAM
from tasks_core.contrib import cli
from tasks_core.exceptions import InvalidTransition, TaskNotFound
from tasks_core.states import TaskStatus


class Command(BaseCommand):
    help = (
        "Act on tasks by id. `cancel`: a task nobody runs yet is cancelled at once; a running "
        "one is asked to stop (its worker interrupts the lambda at its next heartbeat, and "
        "the task ends 'cancelled'). A finished task cannot be cancelled."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        cli.examples(parser, "atf_tasks cancel 41", "atf_tasks cancel 41,42")
        parser.add_argument("action", choices=["cancel"])
        parser.add_argument("ids", type=cli.ids, metavar="ID,ID,...", help="the tasks")

    def handle(self, *args: Any, action: str, ids: list[int], **options: Any) -> None:
        failed = []
        for task_id in ids:
            try:
                task = operations.cancel(EVERY_TEAM, task_id)
            except (InvalidTransition, TaskNotFound) as exc:
                failed.append(f"task {task_id}: {exc}")
                continue
            if task.status == TaskStatus.PROCESSING:
                self.stdout.write(f"task {task_id}: running; its worker is asked to stop it")
            else:
                self.stdout.write(f"task {task_id}: cancelled")
        if failed:
            raise CommandError("; ".join(failed))
