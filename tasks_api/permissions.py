"""Which lambdas and tasks a caller may see and use: the rule of tasks_core.access, for DRF."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from django.db.models import QuerySet
from rest_framework.exceptions import PermissionDenied, ValidationError

from tasks_core import directory
from tasks_core.access import Scope
from tasks_core.exceptions import LambdaNotFound
from tasks_core.models import Lambda, PeriodicTask, TaskEntity

if TYPE_CHECKING:
    # The checked settings (tests.settings) use auth.User as AUTH_USER_MODEL.
    from django.contrib.auth.models import AnonymousUser
    from django.contrib.auth.models import User as AuthUser

    User = AuthUser | AnonymousUser

logger = logging.getLogger(__name__)


def team_ids(user: User) -> frozenset[int] | None:
    """The ids of the caller's teams, or None when it sees every team."""
    return Scope.of(user).team_ids


def lambdas_for(user: User) -> QuerySet[Lambda]:
    """The lambdas the caller may see, gate and schedule."""
    return Scope.of(user).lambdas()


def lambda_ids_for(user: User) -> list[int] | None:
    """Ids of the caller's lambdas, or None for all of them."""
    return Scope.of(user).lambda_ids()


def periodic_tasks_for(user: User) -> QuerySet[PeriodicTask]:
    """The periodic tasks of the caller's lambdas."""
    return Scope.of(user).filter(PeriodicTask.objects.all(), "team")


def tasks_for(user: User) -> QuerySet[TaskEntity]:
    """The tasks the caller may see, cancel and requeue."""
    return Scope.of(user).tasks()


def check_may_schedule(user: User, lambda_names: Iterable[str]) -> None:
    """Raise PermissionDenied (403) for a known lambda of another team.

    Unknown names pass: scheduling reports them as a field error.
    """
    allowed = Scope.of(user)
    if allowed.every_team:
        return
    for name in sorted(set(lambda_names)):
        try:
            info = directory.by_name(name)
        except LambdaNotFound:
            continue
        if not allowed.has_team(info.team_id):
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
