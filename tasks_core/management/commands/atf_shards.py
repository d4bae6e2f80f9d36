"""`manage.py atf_shards`: each shard of the task store, whether it answers, and its tasks."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError

from tasks_core import outcomes, shards
from tasks_core.contrib import cli
from tasks_core.models import TaskEntity
from tasks_core.states import FINAL

HEADINGS = ("SLOT", "ALIAS", "FIRST ID", "REACHABLE", "LIVE", "FINISHED")


class Command(BaseCommand):
    help = (
        "List the shards of the task store (ATF_STORE_SHARDS) by slot: alias, first task id, "
        "whether the database answers, and its live and finished tasks. Exits 1 when a shard "
        "cannot be reached."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        cli.examples(parser, "atf_shards")

    def handle(self, *args: Any, **options: Any) -> None:
        rows = [HEADINGS]
        unreachable = []
        for slot, alias in enumerate(shards.aliases()):
            try:
                live, finished = _counts(alias)
            except DatabaseError as exc:
                unreachable.append(f"{alias} ({(str(exc).splitlines() or [repr(exc)])[0]})")
                rows.append((str(slot), alias, str(shards.first_id(slot)), "no", "-", "-"))
                continue
            rows.append((str(slot), alias, str(shards.first_id(slot)), "yes", str(live),
                         str(finished)))
        widths = [max(len(row[column]) for row in rows) for column in range(len(HEADINGS))]
        for row in rows:
            self.stdout.write("  ".join(cell.ljust(width)
                                        for cell, width in zip(row, widths, strict=True))
                              .rstrip())
        if unreachable:
            raise CommandError(f"unreachable: {'; '.join(unreachable)}")


def _counts(alias: str) -> tuple[int, int]:
    """A shard's tasks that have not finished (read from its rows, by the status index), and
    those that ever finished (its rollup of outcomes and the tail not folded yet)."""
    with shards.using(alias):
        live = TaskEntity.objects.exclude(status__in=[status.value for status in FINAL]).count()
        finished = sum(outcomes.finished_by_lambda().values())
    return live, finished
