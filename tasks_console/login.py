"""Console logins, throttled: after ATF_LOGIN_MAX_FAILURES failed attempts for one user name
from one address, that pair is locked out for ATF_LOGIN_LOCKOUT_S (counted in the cache)."""

from __future__ import annotations

import contextlib
import hashlib
import logging
from typing import Any

from django.contrib.admin.forms import AdminAuthenticationForm
from django.core.cache import cache
from django.core.exceptions import ValidationError

from tasks_core.conf import atf_settings

logger = logging.getLogger(__name__)


def _key(address: str, username: str) -> str:
    who = hashlib.sha256(f"{address}\x00{username.casefold()}".encode(
        "utf-8", "surrogatepass")).hexdigest()[:32]
    return f"{atf_settings.queue_prefix}:login-failures:{who}"


class ThrottledLoginForm(AdminAuthenticationForm):
    """The admin's login form, refusing a locked-out (address, user name) before checking it."""

    error_messages = {
        **AdminAuthenticationForm.error_messages,
        "locked_out": "Too many failed logins: try again in a few minutes.",
    }

    def clean(self) -> dict[str, Any]:
        address = self.request.META.get("REMOTE_ADDR", "") if self.request else ""
        key = _key(address, self.cleaned_data.get("username") or "")
        if (cache.get(key) or 0) >= atf_settings.login_max_failures:
            logger.warning("console login locked out for %s", address,
                           extra={"action": "login_locked_out"})
            raise ValidationError(self.error_messages["locked_out"], code="locked_out")
        try:
            cleaned = super().clean()
        except ValidationError as exc:
            if getattr(exc, "code", None) == "invalid_login":
                cache.add(key, 0, timeout=atf_settings.login_lockout_s)
                # ValueError: the counter vanished (cache unreachable); that try is not counted.
                with contextlib.suppress(ValueError):
                    cache.incr(key)
            raise
        cache.delete(key)
        return cleaned
