"""Who sees and does what: one rule for the API, the console, the commands, stats and /metrics,
which call it directly (`Scope.of(user)`; the operations check it for every action).

A user sees and acts on the lambdas and tasks of the teams they are a member of. Seeing every
team is an explicit permission, `tasks_core.view_all_teams` (a superuser holds every
permission); being staff never implies it, since staff status only opens the console.
Management commands run on the server with the database's own credentials and act for
`EVERY_TEAM`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from django.db.models import Model, QuerySet

from tasks_core import directory, shards
from tasks_core.exceptions import InvalidTask, LambdaNotFound, NotYourTeam
from tasks_core.models import Lambda, PeriodicTask, TaskEntity, Worker
from tasks_core.scheduling import unknown_lambda

if TYPE_CHECKING:
    # The checked settings (tests.settings) use auth.User as AUTH_USER_MODEL.
    from django.contrib.auth.models import AnonymousUser
    from django.contrib.auth.models import User as AuthUser

    User = AuthUser | AnonymousUser

#: The permission that lets a user see and act on every team's lambdas and tasks.
VIEW_ALL_TEAMS = "tasks_core.view_all_teams"

logger = logging.getLogger(__name__)

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

    def periodic_tasks(self) -> QuerySet[PeriodicTask]:
        """The periodic schedules of the scope's lambdas."""
        return self.filter(PeriodicTask.objects.all(), "team")

    def lambda_ids(self) -> list[int] | None:
        """Ids of the scope's lambdas, or None for all of them (what `tasks_core.stats` takes)."""
        if self.team_ids is None:
            return None
        return list(self.lambdas().values_list("pk", flat=True))

    def has_team(self, team_id: int) -> bool:
        return self.team_ids is None or team_id in self.team_ids

    def lambda_names(self) -> frozenset[str] | None:
        """Names of the scope's lambdas, or None for all of them."""
        if self.team_ids is None:
            return None
        return frozenset(self.lambdas().values_list("name", flat=True))

    def workers(self, rows: Iterable[Worker]) -> list[Worker]:
        """The workers among `rows` that serve one of the scope's lambdas (a worker that
        lists none serves every registered lambda)."""
        rows = list(rows)
        mine = self.lambda_names()
        if mine is None:
            return rows
        return [row for row in rows if not row.lambdas or mine & set(row.lambdas)]

    def check_lambda_ids(self, lambda_ids: Iterable[int]) -> None:
        """NotYourTeam unless every lambda of `lambda_ids` is the scope's."""
        wanted = set(lambda_ids)
        if self.team_ids is None or not wanted:
            return
        allowed = set(self.lambdas().filter(pk__in=wanted).values_list("pk", flat=True))
        if wanted - allowed:
            raise NotYourTeam("You may act only on your teams' lambdas.")

    def check_may_schedule(self, lambda_names: Iterable[str]) -> None:
        """InvalidTask on `lambda` for a known lambda of another team, with the answer of an
        unknown one (its name is not confirmed). Unknown names pass: the caller reports
        them, with that answer."""
        if self.team_ids is None:
            return
        for name in sorted(set(lambda_names)):
            try:
                info = directory.by_name(name)
            except LambdaNotFound:
                continue
            if not self.has_team(info.team_id):
                logger.info("refused to schedule %s outside the actor's teams", name,
                            extra={"action": "schedule_refused", "lambda": name})
                raise InvalidTask({"lambda": [unknown_lambda(name)]})

    def check_may_follow(self, parent_ids: Iterable[int]) -> None:
        """InvalidTask on `after` unless the scope holds every parent task: another team's
        task ids are answered like unknown ones."""
        wanted = set(parent_ids)
        if not wanted:
            return
        seen = {pk for part in shards.each(wanted)
                for pk in self.tasks().filter(pk__in=part).values_list("pk", flat=True)}
        if missing := sorted(wanted - seen):
            raise InvalidTask({"after": [
                f"Unknown parent task(s): {', '.join(map(str, missing))}."]})


def may_use_console(user: User) -> bool:
    """Staff who belong to a team, or who may see every team, may use the console (staff
    status alone opens nothing: the rows shown are still the scope's)."""
    if not (user.is_active and user.is_staff):
        return False
    return sees_every_team(user) or bool(Scope.of(user).team_ids)


#: The scope of the management commands and of anything else run by the operator of the server.
EVERY_TEAM = Scope(team_ids=None)
