"""`manage.py atf_lambda NAME [--quota N] [--max-attempts N] ... [--reset]`."""

from __future__ import annotations

import getpass
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from tasks_core import operations, overrides
from tasks_core.access import EVERY_TEAM
from tasks_core.contrib import cli
from tasks_core.exceptions import InvalidOverride, LambdaNotFound
from tasks_core.models import Lambda

#: The value that clears one override (the code's value applies again).
CLEAR = "code"


def _flag(option: overrides.Option) -> str:
    return "--" + option.name.replace("_", "-")


def _who() -> str:
    try:
        return f"atf_lambda ({getpass.getuser()})"
    except (KeyError, OSError):  # no login name (e.g. a container without a passwd entry)
        return "atf_lambda"


def _shown(value: float | None) -> str:
    return "none" if value is None else f"{value:g}"


class Command(BaseCommand):
    help = (
        "Show a lambda's options and where each value comes from (code or operator), or set "
        "operator overrides, which win over the code and survive restarts and deploys."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        cli.examples(parser, "atf_lambda billing.send_invoice",
                     "atf_lambda billing.send_invoice --quota 20 --max-attempts 9",
                     f"atf_lambda billing.send_invoice --quota {CLEAR}",
                     "atf_lambda billing.send_invoice --reset")
        parser.add_argument("name", metavar="NAME", help="the lambda")
        for option in overrides.OPTIONS:
            parser.add_argument(_flag(option), dest=option.name, metavar="N",
                                help=f"{option.text}; '{CLEAR}' returns to the code's value")
        parser.add_argument("--reset", action="store_true",
                            help="clear every override (before applying any given with it)")

    def handle(self, *args: Any, name: str, reset: bool, **options: Any) -> None:
        changes: dict[str, Any] = dict.fromkeys(overrides.BY_NAME) if reset else {}
        for option in overrides.OPTIONS:
            given = options.get(option.name)
            if given is not None:
                changes[option.name] = None if given.strip().lower() == CLEAR else given
        try:
            row = operations.set_options(EVERY_TEAM, name, changes, by=_who())
        except LambdaNotFound:
            raise CommandError(f"unknown lambda {name!r}") from None
        except InvalidOverride as exc:
            raise CommandError("; ".join(
                f"{_flag(overrides.BY_NAME[field])} {options[field]}: {' '.join(messages)}"
                for field, messages in exc.errors.items()
            )) from None
        self.stdout.write(self.render(row))

    def render(self, row: Lambda) -> str:
        """The lambda's options as a table: value in effect, source, code value, who, when."""
        rows = []
        for option_name, item in overrides.resolve(row).items():
            when = "" if item.changed_at is None else f"{item.changed_at:%Y-%m-%d %H:%M:%S} UTC"
            rows.append([option_name, _shown(item.value), item.source, _shown(item.code_value),
                         item.changed_by or "", when])
        table = cli.table(["OPTION", "VALUE", "SOURCE", "CODE VALUE", "CHANGED BY", "CHANGED AT"],
                          rows)
        return f"{row.name} (team {row.team.name})\n{table}"
