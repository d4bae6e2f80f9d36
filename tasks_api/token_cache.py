"""A short-lived memory, per server process, of the tokens that authenticated recently.

Without it every API request reads the token row and its user, then the user's permissions
and teams (four queries before any work). Here a token's row is kept for
ATF_API_AUTH_CACHE_S seconds, with its user and that user's teams already resolved
(`tasks_core.access.Scope`). The checks that depend on the time (revoked, expired, inactive
user) still run on every request against the remembered row; what the memory delays is the
news of a change made elsewhere:

- a token revoked, a user deactivated, a team membership or permission changed in another
  process takes effect within ATF_API_AUTH_CACHE_S seconds;
- the same changes made in this process (`tokens.revoke`, saving a user or a token, adding or
  removing a member) forget everything remembered, so they take effect at once.

0 turns the memory off. Unknown tokens are never remembered.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db.models.base import ModelState
from django.db.models.signals import m2m_changed, post_delete, post_save

from tasks_api.memory import ShortMemory
from tasks_api.models import ApiToken
from tasks_core.access import Scope
from tasks_core.models import Team

_rows: ShortMemory[str, ApiToken] = ShortMemory()


def get(digest: str) -> ApiToken | None:
    """A copy of the row remembered for `digest` (with its own user), or None."""
    row = _rows.get(digest)
    return None if row is None else _copied(row)


def put(digest: str, row: ApiToken) -> None:
    """Remember `row` (read with its user and team) and resolve its user's teams now."""
    Scope.of(row.user)  # remembered on the user object, so on every copy of it
    _rows.put(digest, row)


def forget_all(*_args: Any, **_kwargs: Any) -> None:
    """Forget every token (a signal receiver too: a change of tokens, users or teams)."""
    _rows.forget_all()


def _copied(row: ApiToken) -> ApiToken:
    """Requests run on threads: each gets its own row and user, the scope and permissions
    already on them, so nothing one request sets on them reaches another."""
    mine = _model_copy(row)
    mine.user = _model_copy(row.user)
    return mine


def _model_copy(instance: Any) -> Any:
    """What `copy.copy` makes of a model instance (its own attributes, its own ModelState
    and cache of related rows; Model.__getstate__), without the pickling protocol that
    `copy.copy` goes through: a few dict copies, on every authenticated request. (Neither
    a token nor a user has a binary field, the one kind whose value __getstate__ converts.)"""
    state = ModelState()
    state.__dict__.update(instance._state.__dict__)
    state.fields_cache = dict(instance._state.fields_cache)
    twin = instance.__class__.__new__(instance.__class__)
    twin.__dict__.update(instance.__dict__)
    twin._state = state
    return twin


def connect_signals() -> None:
    """Forget remembered tokens when this process changes a token, a user, a membership or a
    permission (AppConfig.ready calls this)."""
    user_model = get_user_model()
    for model in (ApiToken, user_model, Group, Team):
        post_save.connect(forget_all, sender=model, dispatch_uid=f"atf-token-cache-{model}")
        post_delete.connect(forget_all, sender=model,
                            dispatch_uid=f"atf-token-cache-del-{model}")
    relations = (getattr(user_model, name, None) for name in ("groups", "user_permissions"))
    throughs = [Team.members.through, Group.permissions.through,
                *(relation.through for relation in relations if relation is not None)]
    for through in throughs:
        m2m_changed.connect(forget_all, sender=through,
                            dispatch_uid=f"atf-token-cache-m2m-{through}")
