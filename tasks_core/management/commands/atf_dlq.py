"""`manage.py atf_dlq list|requeue|discard [--lambda NAME] [--collection NAME] [--ids 1,2]`."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import QuerySet

from tasks_core import operations
from tasks_core.access import EVERY_TEAM
from tasks_core.contrib import cli
from tasks_core.exceptions import InvalidTask
from tasks_core.models import TaskEntity
from tasks_core.states import TaskStatus

DONE = {"requeue": "requeued", "discard": "discarded"}


class Command(BaseCommand):
    help = (
        "The dead-letter queue: tasks whose attempts ran out. List them, requeue them (back to "
        "'new' with their attempts reset; chained children come back too) or discard them."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        cli.examples(parser, "atf_dlq list --lambda billing.send_invoice",
                     "atf_dlq requeue --ids 41,42",
                     "atf_dlq discard --lambda billing.send_invoice --collection marketing")
        parser.add_argument("action", choices=["list", "requeue", "discard"])
        parser.add_argument("--lambda", dest="lambda_name", metavar="NAME",
                            help="only dead tasks of this lambda")
        parser.add_argument("--collection", metavar="NAME",
                            help="only dead tasks of this collection (with --lambda)")
        parser.add_argument("--ids", type=cli.ids, metavar="ID,ID,...",
                            help="only these tasks")
        parser.add_argument("--limit", type=int, default=50,
                            help="most tasks `list` shows (default 50)")

    def handle(self, *args: Any, action: str, lambda_name: str | None, collection: str | None,
               ids: list[int] | None, limit: int, **options: Any) -> None:
        try:
            dead = operations.dead_letters(EVERY_TEAM, ids=ids, lambda_name=lambda_name,
                                           collection=collection, listing=action == "list")
            if action == "list":
                self._list(dead.order_by("pk"), limit)
                return
            done = self._apply(action, dead)
        except InvalidTask as exc:
            raise CommandError(cli.errors_line(exc)) from None
        asked = f" of {len(ids)}" if ids else ""
        skipped = " (the others are not dead)" if ids and done < len(ids) else ""
        self.stdout.write(f"{DONE[action]} {done}{asked} dead task(s){skipped}")

    def _list(self, dead: QuerySet[TaskEntity], limit: int) -> None:
        total = dead.count()
        rows = dead.values_list("pk", "lambda_ref__name", "collection", "attempts",
                                "finished_at", "last_error")[:max(limit, 0)]
        self.stdout.write(cli.table(
            ["ID", "LAMBDA", "COLLECTION", "ATTEMPTS", "DIED", "LAST ERROR"],
            [(pk, name, coll, attempts,
              finished.strftime("%Y-%m-%d %H:%M:%S") if finished else "-", _error_line(error))
             for pk, name, coll, attempts, finished, error in rows],
        ))
        shown = min(total, max(limit, 0))
        self.stdout.write(f"{total} dead task(s)" + (f", {shown} shown" if shown < total else ""))

    def _apply(self, action: str, dead: QuerySet[TaskEntity]) -> int:
        progress = cli.Progress(self.stderr, total=dead.count(), label=action)
        if action == "requeue":
            done = operations.requeue_many(EVERY_TEAM, dead, statuses=[TaskStatus.DEAD],
                                           progress=progress.advance)
        else:
            done = operations.discard_many(EVERY_TEAM, dead, progress=progress.advance)
        progress.close()
        return done.changed


def _error_line(error: dict[str, Any] | None, limit: int = 60) -> str:
    if not error:
        return "-"
    line = f"{error.get('type', '')}: {error.get('message', '')}".splitlines()[0]
    return line if len(line) <= limit else line[:limit - 1] + "…"
