"""`manage.py atf_prune [--older-than 7d] [--batch-size N] [--dry-run]`."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from tasks_core import outcomes, retention
from tasks_core.conf import atf_settings
from tasks_core.contrib import cli


class Command(BaseCommand):
    help = (
        "Delete finished tasks (success, fatal_failure, dead, cancelled, dropped) that finished "
        "longer ago than --older-than, in small batches that hold no long locks. The consumer "
        "does the same by itself with ATF_RETENTION_S."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        cli.examples(parser, "atf_prune --older-than 7d --dry-run", "atf_prune --older-than 7d")
        parser.add_argument("--older-than", dest="older_than_s", type=cli.duration_s,
                            metavar="AGE",
                            help="age of finished tasks to delete: 7d, 12h, 90m, 3600 "
                                 "(default: ATF_RETENTION_S)")
        parser.add_argument("--batch-size", type=int, default=1000, metavar="N",
                            help="tasks deleted per transaction (default 1000)")
        parser.add_argument("--dry-run", action="store_true",
                            help="only count what would be deleted")

    def handle(self, *args: Any, older_than_s: float | None, batch_size: int, dry_run: bool,
               **options: Any) -> None:
        if older_than_s is None:
            older_than_s = atf_settings.retention_s
            if older_than_s <= 0:
                raise CommandError("ATF_RETENTION_S is 0 (keep everything); give --older-than")
        if not 1 <= batch_size <= 100_000:
            raise CommandError("--batch-size must be between 1 and 100000")
        now = timezone.now()
        # Tasks the rollup of outcomes does not count yet are not deleted: fold them first.
        outcomes.fold(now=now, budget_s=float("inf"))
        total = retention.prunable(now=now, older_than_s=older_than_s).count()
        age = f"{older_than_s / 86400:g} days" if older_than_s >= 86400 else f"{older_than_s:g}s"
        if dry_run:
            self.stdout.write(f"{total} finished task(s) older than {age} would be deleted")
            return
        progress = cli.Progress(self.stderr, total=total, label="pruning")
        deleted = 0
        while batch := retention.prune_batch(now=now, batch_size=batch_size,
                                             older_than_s=older_than_s):
            deleted += batch
            progress.advance(batch)
        progress.close()
        self.stdout.write(f"deleted {deleted} finished task(s) older than {age}")
