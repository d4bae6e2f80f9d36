"""Who sees what: one rule for the API, the console, the commands, stats and /metrics.

A user sees and acts on the lambdas and tasks of the teams they are a member of. Seeing every
team is an explicit permission, `tasks_core.view_all_teams` (a superuser holds every
permission); being staff never implies it, since staff status only opens the console.
Management commands run on the server with the database's own credentials and act for
`EVERY_TEAM`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from django.db.models import Model, QuerySet

from tasks_core.models import Lambda, TaskEntity

if TYPE_CHECKING:
    # The checked settings (tests.settings) use auth.User as AUTH_USER_MODEL.
    from django.contrib.auth.models import AnonymousUser
    from django.contrib.auth.models import User as AuthUser

    User = AuthUser | AnonymousUser

#: The permission that lets a user see and act on every team's lambdas and tasks.
VIEW_ALL_TEAMS = "tasks_core.view_all_teams"

_M = TypeVar("_M", bound=Model)


def sees_every_team(user: User) -> bool:
    """Whether `user` may see and act on every team (superusers, and holders of VIEW_ALL_TEAMS)."""
    return bool(user.is_active and user.has_perm(VIEW_ALL_TEAMS))


@dataclass(frozen=True)
class Scope:
    """The teams an actor may see and act on; `team_ids` None means every team."""

    team_ids: frozenset[int] | None

    @classmethod
    def of(cls, user: User) -> Scope:
        """The scope of `user` (remembered on the user object for the rest of the request)."""
        cached = getattr(user, "_atf_scope", None)
        if cached is None:
            if sees_every_team(user):
                cached = EVERY_TEAM
            elif user.is_authenticated:
                cached = cls(frozenset(user.atf_teams.values_list("pk", flat=True)))
            else:
                cached = cls(frozenset())
            user._atf_scope = cached  # type: ignore[union-attr]
        return cached

    @property
    def every_team(self) -> bool:
        return self.team_ids is None

    def filter(self, queryset: QuerySet[_M], team_path: str) -> QuerySet[_M]:
        """`queryset` limited to rows whose team (reached by `team_path`) is in the scope."""
        if self.team_ids is None:
            return queryset
        return queryset.filter(**{f"{team_path}__in": sorted(self.team_ids)})

    def lambdas(self) -> QuerySet[Lambda]:
        return self.filter(Lambda.objects.all(), "team")

    def tasks(self) -> QuerySet[TaskEntity]:
        return self.filter(TaskEntity.objects.all(), "lambda_ref__team")

    def lambda_ids(self) -> list[int] | None:
        """Ids of the scope's lambdas, or None for all of them (what `tasks_core.stats` takes)."""
        if self.team_ids is None:
            return None
        return list(self.lambdas().values_list("pk", flat=True))

    def has_team(self, team_id: int) -> bool:
        return self.team_ids is None or team_id in self.team_ids


#: The scope of the management commands and of anything else run by the operator of the server.
EVERY_TEAM = Scope(team_ids=None)
