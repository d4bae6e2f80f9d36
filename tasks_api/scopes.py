"""What a token's scope lets it call: `full` tokens the API, `worker` tokens the worker calls.

Every API view refuses worker tokens (403) through `FullAccess`, which settings.py puts in
DRF's DEFAULT_PERMISSION_CLASSES. A view for workers opts in with
`permission_classes = [WorkerOnly]`: it then accepts only a worker token, and
`worker_team_id(request)` names the one team whose lambdas that token may work on.
`is_worker_token(request)` (or `request.auth.scope`, an `ApiToken`'s `Scope`) tells the two
apart; a session or no token is never a worker token.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rest_framework.permissions import BasePermission

from tasks_api.models import ApiToken, Scope

if TYPE_CHECKING:
    from rest_framework.request import Request
    from rest_framework.views import APIView


def is_worker_token(request: Request) -> bool:
    """True when the caller authenticated with a worker-scoped token."""
    return isinstance(request.auth, ApiToken) and request.auth.scope == Scope.WORKER


def worker_credential(request: Request) -> str:
    """What a worker token's registered workers are bound to: the token itself."""
    assert isinstance(request.auth, ApiToken)
    return f"token:{request.auth.pk}"


def worker_team_id(request: Request) -> int | None:
    """The team of the caller's worker token; None when the caller has none."""
    return request.auth.team_id if is_worker_token(request) else None  # type: ignore[union-attr]


class FullAccess(BasePermission):
    """Refuses worker tokens: they may make only the worker calls."""

    message = "A worker token may only make the worker calls."

    def has_permission(self, request: Request, view: APIView) -> bool:
        return not is_worker_token(request)


class WorkerOnly(BasePermission):
    """Accepts only a worker token that belongs to a team."""

    message = "This call needs a worker token."

    def has_permission(self, request: Request, view: APIView) -> bool:
        return worker_team_id(request) is not None
