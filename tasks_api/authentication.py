"""`Authorization: Token <token>`: the caller is its user; `request.auth` is its ApiToken."""

from __future__ import annotations

import logging
from typing import Any

from django.utils import timezone
from rest_framework import authentication, exceptions

from tasks_api import tokens
from tasks_api.models import Scope
from tasks_core import access

logger = logging.getLogger(__name__)


class ApiTokenAuthentication(authentication.TokenAuthentication):
    """DRF's token header, checked against the stored digests of our tokens.

    Unknown, revoked and expired tokens, tokens of inactive users, and worker tokens whose user
    is no longer a member of their team, answer 401. (A full token acts with its user's rights,
    which follow the user's teams already; a worker token acts for its team, so it must follow
    its user's membership of that team.) Membership is read with the token, remembered at
    most ATF_API_AUTH_CACHE_S like the rest of it.
    """

    def authenticate_credentials(self, key: str) -> tuple[Any, tokens.ApiToken]:
        row = tokens.find(key)
        now = timezone.now()
        if row is None:
            raise exceptions.AuthenticationFailed("Invalid token.")
        if not row.is_active(now):
            logger.info("refused %s token %s", "revoked" if row.revoked_at else "expired",
                        row.prefix, extra={"action": "token_refused", "token_id": row.pk})
            raise exceptions.AuthenticationFailed("Token revoked or expired.")
        if not row.user.is_active:
            raise exceptions.AuthenticationFailed("User inactive or deleted.")
        if row.scope == Scope.WORKER and not (
                row.team_id is not None and access.Scope.of(row.user).has_team(row.team_id)):
            logger.info("refused worker token %s: its user left its team", row.prefix,
                        extra={"action": "token_refused", "token_id": row.pk})
            raise exceptions.AuthenticationFailed(
                "The token's user is no longer a member of its team.")
        tokens.touch(row, now=now)
        return row.user, row
