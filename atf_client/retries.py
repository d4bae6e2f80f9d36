"""When the client tries a refused request again: 429 (throttled) and 503 (unavailable).

Both mean the server did nothing with the request, so any request, a POST included, may be
sent again. The wait is the server's `Retry-After` when it sends one, else an exponential
backoff with jitter; either is capped at `max_wait`.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

#: The statuses after which a request is sent again.
RETRIED_STATUSES = frozenset({429, 503})


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """How often and how long to wait; `NO_RETRIES` (`Client(retries=NO_RETRIES)`) turns
    retrying off."""

    attempts: int = 4  #: further tries after the first answer of 429 or 503
    backoff: float = 0.5  #: seconds: the first backoff's ceiling; it doubles each try
    max_wait: float = 30.0  #: seconds: the longest wait, the server's Retry-After included

    def wait_s(self, retry: int, retry_after_s: float | None,
               rand: Callable[[], float] = random.random) -> float:
        """Seconds to wait before try number `retry` (from 1): the server's Retry-After, else
        a random part of the backoff ceiling; capped at `max_wait`."""
        if retry_after_s is not None and retry_after_s >= 0:
            return min(retry_after_s, self.max_wait)
        ceiling = min(self.backoff * 2 ** (retry - 1), self.max_wait)
        return ceiling * (0.5 + rand() / 2)


#: No retries at all.
NO_RETRIES = RetryPolicy(attempts=0)
