"""Who sees what: a superuser sees everything; other staff only their teams' lambdas and tasks."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet

from tasks_core.models import Lambda, Worker

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

    User = AbstractBaseUser | AnonymousUser


def sees_everything(user: User) -> bool:
    return bool(user.is_active and user.is_superuser)


def is_console_user(user: User) -> bool:
    """Staff who belong to a team (or superusers) may use the console."""
    if not (user.is_active and user.is_staff):
        return False
    return sees_everything(user) or user.atf_teams.exists()


def team_filter(user: User, team_path: str) -> Q:
    """A filter keeping rows whose team (reached by `team_path`) has `user` as a member."""
    if sees_everything(user):
        return Q()
    return Q(**{f"{team_path}__in": user.atf_teams.values("pk")}) if user.is_authenticated \
        else Q(pk__in=[])


def scope(queryset: QuerySet, user: User, team_path: str) -> QuerySet:
    """`queryset` limited to the rows of `user`'s teams."""
    return queryset.filter(team_filter(user, team_path))


def visible_lambdas(user: User) -> QuerySet[Lambda]:
    return scope(Lambda.objects.all(), user, "team")


def check_lambdas(user: User, lambda_ids: Iterable[int]) -> None:
    """Raise PermissionDenied unless `user` may act on every lambda in `lambda_ids`."""
    wanted = set(lambda_ids)
    if sees_everything(user) or not wanted:
        return
    allowed = set(visible_lambdas(user).filter(pk__in=wanted).values_list("pk", flat=True))
    if wanted - allowed:
        raise PermissionDenied("You may act only on your teams' lambdas.")


def visible_workers(user: User, workers: Iterable[Worker]) -> list[Worker]:
    """Workers serving one of `user`'s lambdas (an empty list means all registered lambdas)."""
    workers = list(workers)
    if sees_everything(user):
        return workers
    mine = set(visible_lambdas(user).values_list("name", flat=True))
    return [worker for worker in workers if not worker.lambdas or mine & set(worker.lambdas)]
