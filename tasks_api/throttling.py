"""Per-token request limits: a fixed-window counter in the cache, answered 429 + Retry-After."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from django.core.exceptions import ImproperlyConfigured
from rest_framework.throttling import BaseThrottle

from tasks_api.models import ApiToken
from tasks_api.window_count import count_in_window
from tasks_core.conf import atf_settings

if TYPE_CHECKING:
    from rest_framework.request import Request
    from rest_framework.views import APIView

logger = logging.getLogger(__name__)

_PERIODS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_rate(rate: str) -> tuple[int, int]:
    """"6000/min" -> (6000, 60): requests allowed per period of seconds."""
    count, _slash, period = rate.partition("/")
    try:
        return int(count), _PERIODS_S[period.strip()[:1]]
    except (KeyError, ValueError):
        raise ImproperlyConfigured(
            f"ATF_API_THROTTLE_RATE={rate!r}: write requests/period, e.g. 6000/min or 100/s"
        ) from None


class TokenRateThrottle(BaseThrottle):
    """At most ATF_API_THROTTLE_RATE requests per token (per user for a session) and window.

    One counter per window costs one cache round trip per request (two for the window's
    first), whatever the rate, and no script (tasks_api/window_count.py); an unreachable
    cache lets requests through rather than refusing them.
    """

    def __init__(self) -> None:
        self.wait_s: float | None = None

    def allow_request(self, request: Request, view: APIView) -> bool:
        rate = atf_settings.api_throttle_rate
        if not rate:
            return True
        limit, period_s = parse_rate(rate)
        now = time.time()
        window = int(now // period_s)
        key = f"{atf_settings.queue_prefix}:throttle:{self._ident(request)}:{window}"
        count = count_in_window(key, 1, timeout_s=period_s + 1)
        if count is None or count <= limit:
            return True
        self.wait_s = (window + 1) * period_s - now
        logger.info("throttled %s", self._ident(request), extra={"action": "throttled"})
        return False

    def wait(self) -> float | None:
        return self.wait_s

    def _ident(self, request: Request) -> str:
        if isinstance(request.auth, ApiToken):
            return f"token-{request.auth.pk}"
        if request.user and request.user.is_authenticated:
            return f"user-{request.user.pk}"
        return f"addr-{self.get_ident(request)}"
