"""`manage.py atf_token TEAM USERNAME`: a working API token for a team member, on the last line."""

from __future__ import annotations

import logging
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction
from rest_framework.authtoken.models import Token

from tasks_core.models import Team

logger = logging.getLogger(__name__)


class Command(BaseCommand):
    help = ("Create the team and the user if missing, add the user to the team and print the "
            "user's API token as the last line.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("team", help="team name (created if missing)")
        parser.add_argument("username", help="user name (created if missing, without password)")

    def handle(self, *args: Any, team: str, username: str, **options: Any) -> None:
        with transaction.atomic():
            team_row, team_created = Team.objects.get_or_create(name=team)
            user, user_created = get_user_model().objects.get_or_create(
                username=username, defaults={"is_active": True})
            if user_created:
                user.set_unusable_password()
                user.save(update_fields=["password"])
            team_row.members.add(user)
            token, _created = Token.objects.get_or_create(user=user)
        if options["verbosity"] >= 1:
            self.stderr.write(f"team {team}{' (new)' if team_created else ''}, user "
                              f"{username}{' (new)' if user_created else ''}")
        self.stdout.write(token.key)
