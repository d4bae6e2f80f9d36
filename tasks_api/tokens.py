"""Issue, find and revoke API tokens. Only a SHA-256 digest of a token is ever stored.

A token is `atf_` and 40 random URL-safe characters (240 bits): too long to guess, so a fast
hash is enough and a lookup costs one indexed query. The first characters (`prefix`) are kept
in clear so that people can tell their tokens apart in lists.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.db.models import Q, QuerySet

from tasks_api import token_cache
from tasks_api.models import ApiToken, Scope
from tasks_core.models import Team

if TYPE_CHECKING:
    from django.contrib.auth.models import User

logger = logging.getLogger(__name__)

#: Characters of a token kept in clear for display.
PREFIX_LENGTH = 12
#: Seconds between two writes of a token's last_used_at (not one write per request).
LAST_USED_RESOLUTION_S = 60.0


@dataclass(frozen=True, kw_only=True)
class Issued:
    """A token just made: the row, and the token itself (shown once, never stored)."""

    row: ApiToken
    token: str


def digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def issue(*, user: User, team: Team | None, name: str, scope: Scope = Scope.FULL,
          expires_at: datetime | None = None) -> Issued:
    """Create a token for `user` in `team` and return it with the clear text."""
    row = ApiToken(user=user, team=team, name=name, scope=scope, expires_at=expires_at)
    return Issued(row=row, token=save_new(row))


def save_new(row: ApiToken) -> str:
    """Give the unsaved `row` a fresh token, save it, and return the token (shown only now)."""
    token = "atf_" + secrets.token_urlsafe(30)
    row.prefix, row.digest = token[:PREFIX_LENGTH], digest(token)
    row.save()
    logger.info("issued %s token %s for %s", row.scope, row.prefix, row.user,
                extra={"action": "token_issued", "token_id": row.pk})
    return token


def find(token: str) -> ApiToken | None:
    """The row of `token`, revoked or expired ones included; None when unknown.

    Read from the database at most every ATF_API_AUTH_CACHE_S seconds (tasks_api.token_cache).
    """
    key = digest(token)
    if (row := token_cache.get(key)) is not None:
        return row
    row = ApiToken.objects.select_related("user", "team").filter(digest=key).first()
    if row is not None:
        token_cache.put(key, row)
    return row


def touch(row: ApiToken, *, now: datetime) -> None:
    """Record that `row` was used, at most once per LAST_USED_RESOLUTION_S."""
    resolution = timedelta(seconds=LAST_USED_RESOLUTION_S)
    if row.last_used_at is None or now - row.last_used_at >= resolution:
        ApiToken.objects.filter(pk=row.pk).update(last_used_at=now)
        row.last_used_at = now


def acting_on(team_ids: frozenset[int] | None) -> QuerySet[ApiToken]:
    """Tokens that can act on any of the given teams (None: every token), so that a team sees
    and may revoke each: those filed under one of them, and the full tokens of their members,
    which act with their user's rights wherever they are filed."""
    rows = ApiToken.objects.select_related("user", "team")
    if team_ids is None:
        return rows
    ids = sorted(team_ids)
    members = ApiToken.objects.filter(scope=Scope.FULL, user__atf_teams__in=ids).values("pk")
    return rows.filter(Q(team_id__in=ids) | Q(pk__in=members))


def revoke(row: ApiToken, *, now: datetime) -> ApiToken:
    """Revoke `row` (a second revocation keeps the first time)."""
    ApiToken.objects.filter(pk=row.pk, revoked_at__isnull=True).update(revoked_at=now)
    token_cache.forget_all()  # an update() sends no post_save
    row.refresh_from_db(fields=["revoked_at"])
    logger.info("revoked token %s", row.prefix, extra={"action": "token_revoked",
                                                       "token_id": row.pk})
    return row
