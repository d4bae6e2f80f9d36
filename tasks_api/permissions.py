"""Which lambdas and tasks a caller may see and use: its teams' own; staff see everything."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from django.db.models import QuerySet
from rest_framework.exceptions import PermissionDenied, ValidationError

from tasks_core import directory
from tasks_core.exceptions import LambdaNotFound
from tasks_core.models import Lambda, TaskEntity

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

    User = AbstractBaseUser | AnonymousUser

logger = logging.getLogger(__name__)


def sees_everything(user: User) -> bool:
    return bool(getattr(user, "is_staff", False) or getattr(user, "is_superuser", False))


def team_ids(user: User) -> frozenset[int] | None:
    """The ids of the caller's teams, or None for staff, who see every team (cached per user)."""
    if sees_everything(user):
        return None
    cached = getattr(user, "_atf_team_ids", None)
    if cached is None:
        cached = frozenset()
        if user.is_authenticated:
            cached = frozenset(user.atf_teams.values_list("pk", flat=True))
        user._atf_team_ids = cached  # type: ignore[union-attr]
    return cached


def lambdas_for(user: User) -> QuerySet[Lambda]:
    """The lambdas the caller may see, gate and schedule."""
    teams = team_ids(user)
    lambdas = Lambda.objects.all()
    return lambdas if teams is None else lambdas.filter(team_id__in=list(teams))


def lambda_ids_for(user: User) -> list[int] | None:
    """Ids of the caller's lambdas, or None for all of them (staff)."""
    if team_ids(user) is None:
        return None
    return list(lambdas_for(user).values_list("pk", flat=True))


def tasks_for(user: User) -> QuerySet[TaskEntity]:
    """The tasks the caller may see, cancel and requeue."""
    teams = team_ids(user)
    tasks = TaskEntity.objects.all()
    return tasks if teams is None else tasks.filter(lambda_ref__team_id__in=list(teams))


def check_may_schedule(user: User, lambda_names: Iterable[str]) -> None:
    """Raise PermissionDenied (403) for a known lambda of another team.

    Unknown names pass: scheduling reports them as a field error.
    """
    teams = team_ids(user)
    if teams is None:
        return
    for name in sorted(set(lambda_names)):
        try:
            info = directory.by_name(name)
        except LambdaNotFound:
            continue
        if info.team_id not in teams:
            logger.info("refused to schedule %s for %s", name, user,
                        extra={"action": "schedule_refused", "lambda": name})
            raise PermissionDenied(f"Lambda {name!r} belongs to another team.")


def check_may_follow(user: User, parent_ids: Iterable[int]) -> None:
    """400 unless the caller sees every parent task (another team's ids do not leak)."""
    wanted = set(parent_ids)
    if not wanted:
        return
    seen = set(tasks_for(user).filter(pk__in=wanted).values_list("pk", flat=True))
    if missing := sorted(wanted - seen):
        listed = ", ".join(map(str, missing))
        raise ValidationError({"after": [f"Unknown parent task(s): {listed}."]})
