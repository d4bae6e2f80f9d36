"""`manage.py atf_gate LAMBDA[/COLLECTION] open|pause|drop [--until TIME]`."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from tasks_core import operations
from tasks_core.access import EVERY_TEAM
from tasks_core.contrib import cli
from tasks_core.exceptions import InvalidTask, LambdaNotFound
from tasks_core.gating import GateState

#: The action words an operator types, and the gate state each sets.
ACTIONS = {"open": GateState.OPEN, "pause": GateState.PAUSED, "drop": GateState.DROPPED}


class Command(BaseCommand):
    help = (
        "Open, pause or drop a lambda, or one collection of it. Paused tasks wait (nothing is "
        "lost; opening delivers them); dropped tasks end 'dropped' when they come due."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        cli.examples(parser, "atf_gate billing.send_invoice pause --until 30m",
                     "atf_gate billing.send_invoice/marketing drop",
                     "atf_gate billing.send_invoice open")
        parser.add_argument("target", metavar="LAMBDA[/COLLECTION]",
                            help="a lambda name, or lambda/collection for one collection")
        parser.add_argument("action", choices=sorted(ACTIONS), help="what to do with the gate")
        parser.add_argument("--until", type=cli.moment, metavar="TIME",
                            help="reopen by itself at this time: ISO 8601 "
                                 "(2026-01-31T18:00:00Z) or a duration from now (30m, 2h, 1d)")

    def handle(self, *args: Any, target: str, action: str, until: Any = None,
               **options: Any) -> None:
        lambda_name, _slash, collection = target.partition("/")
        if not lambda_name or (_slash and not collection):
            raise CommandError(f"{target!r}: write LAMBDA or LAMBDA/COLLECTION")
        try:
            operations.gate(EVERY_TEAM, lambda_name, ACTIONS[action],
                            collection=collection or None, until=until)
        except LambdaNotFound:
            raise CommandError(f"unknown lambda {lambda_name!r}") from None
        except InvalidTask as exc:
            raise CommandError(cli.errors_line(exc)) from None
        state = ACTIONS[action].value
        self.stdout.write(f"{target}: {state}" + (f" until {until.isoformat()}" if until else ""))
