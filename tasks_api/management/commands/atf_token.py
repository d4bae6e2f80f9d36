"""`manage.py atf_token TEAM USERNAME [--worker]`: a new API token for a team member.

The token is printed once, as the last line; only its hash is stored.
"""

from __future__ import annotations

import argparse
import logging
from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction
from django.utils import timezone

from tasks_api import tokens
from tasks_api.models import Scope
from tasks_core.models import Team

logger = logging.getLogger(__name__)


def _positive_days(text: str) -> float:
    try:
        days = float(text)
    except ValueError:
        days = 0.0
    if not 0 < days < 100_000:
        raise argparse.ArgumentTypeError(f"{text!r}: give a positive number of days")
    return days


def _name(text: str) -> str:
    if not text or len(text) > 100 or not text.isprintable():
        raise argparse.ArgumentTypeError(f"{text!r}: give 1 to 100 printable characters")
    return text


class Command(BaseCommand):
    help = ("Create the team and the user if missing, add the user to the team, make a new API "
            "token and print it as the last line (it is shown only this once).")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("team", type=_name, help="team name (created if missing)")
        parser.add_argument("username", type=_name,
                            help="user name (created if missing, without password)")
        parser.add_argument("--worker", action="store_true",
                            help="a worker token: only the worker calls for the team's lambdas")
        parser.add_argument("--name", type=_name, default=None,
                            help="a name to tell the token apart (default: atf_token USERNAME)")
        parser.add_argument("--expires-days", type=_positive_days, default=None,
                            help="days until the token stops working (default: never)")

    def handle(self, *args: Any, team: str, username: str, worker: bool, name: str | None,
               expires_days: float | None, **options: Any) -> None:
        expires_at = None
        if expires_days is not None:
            expires_at = timezone.now() + timedelta(days=expires_days)
        with transaction.atomic():
            team_row, team_created = Team.objects.get_or_create(name=team)
            user, user_created = get_user_model().objects.get_or_create(
                username=username, defaults={"is_active": True})
            if user_created:
                user.set_unusable_password()
                user.save(update_fields=["password"])
            team_row.members.add(user)
            issued = tokens.issue(user=user, team=team_row, name=name or f"atf_token {username}",
                                  scope=Scope.WORKER if worker else Scope.FULL,
                                  expires_at=expires_at)
        if options["verbosity"] >= 1:
            self.stderr.write(f"team {team}{' (new)' if team_created else ''}, user "
                              f"{username}{' (new)' if user_created else ''}, "
                              f"{issued.row.scope} token {issued.row.prefix}… (shown once)")
        self.stdout.write(issued.token)
