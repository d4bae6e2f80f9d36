"""Who sees what in the console: the rule of `tasks_core.access`, plus who may open the console.

Staff status opens the console; the rows shown are those of the user's teams, or of every team
for a user with the `tasks_core.view_all_teams` permission (superusers hold it).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, TypeVar

from django.core.exceptions import PermissionDenied
from django.db.models import Model, QuerySet

from tasks_core import access
from tasks_core.access import Scope
from tasks_core.models import Lambda, Worker

if TYPE_CHECKING:
    # The checked settings (tests.settings) use auth.User as AUTH_USER_MODEL.
    from django.contrib.auth.models import AnonymousUser
    from django.contrib.auth.models import User as AuthUser

    User = AuthUser | AnonymousUser

_M = TypeVar("_M", bound=Model)


def sees_everything(user: User) -> bool:
    return access.sees_every_team(user)


def is_console_user(user: User) -> bool:
    """Staff who belong to a team, or who may see every team, may use the console."""
    if not (user.is_active and user.is_staff):
        return False
    return sees_everything(user) or bool(Scope.of(user).team_ids)


def scope(queryset: QuerySet[_M], user: User, team_path: str) -> QuerySet[_M]:
    """`queryset` limited to the rows of `user`'s teams (its team reached by `team_path`)."""
    return Scope.of(user).filter(queryset, team_path)


def visible_lambdas(user: User) -> QuerySet[Lambda]:
    return Scope.of(user).lambdas()


def check_lambdas(user: User, lambda_ids: Iterable[int]) -> None:
    """Raise PermissionDenied unless `user` may act on every lambda in `lambda_ids`."""
    wanted = set(lambda_ids)
    if sees_everything(user) or not wanted:
        return
    allowed = set(visible_lambdas(user).filter(pk__in=wanted).values_list("pk", flat=True))
    if wanted - allowed:
        raise PermissionDenied("You may act only on your teams' lambdas.")


def visible_lambda_names(user: User) -> frozenset[str] | None:
    """Names of the lambdas `user` sees, or None for all of them."""
    if sees_everything(user):
        return None
    return frozenset(visible_lambdas(user).values_list("name", flat=True))


def visible_workers(user: User, workers: Iterable[Worker]) -> list[Worker]:
    """Workers serving one of `user`'s lambdas (an empty list means all registered lambdas)."""
    workers = list(workers)
    mine = visible_lambda_names(user)
    if mine is None:
        return workers
    return [worker for worker in workers if not worker.lambdas or mine & set(worker.lambdas)]


def worker_lambdas(worker: Worker, names: frozenset[str] | None) -> str:
    """The lambdas a worker serves, as the user may read them: only those in `names`."""
    if not worker.lambdas:
        return "all registered"
    return ", ".join(name for name in worker.lambdas if names is None or name in names)
