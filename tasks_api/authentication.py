"""`Authorization: Token <token>`: the caller is its user; `request.auth` is its ApiToken."""

from __future__ import annotations

import logging
from typing import Any

from django.utils import timezone
from rest_framework import authentication, exceptions

from tasks_api import tokens

logger = logging.getLogger(__name__)


class ApiTokenAuthentication(authentication.TokenAuthentication):
    """DRF's token header, checked against the stored digests of our tokens.

    Unknown, revoked and expired tokens, and tokens of inactive users, answer 401.
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
        tokens.touch(row, now=now)
        return row.user, row
