"""Backoff of retriable failures: exponential, capped, with full jitter. Pure."""

from __future__ import annotations

import random
from collections.abc import Callable


def delay_s(attempt: int, *, base_s: float, cap_s: float,
            rand: Callable[[], float] = random.random) -> float:
    """Seconds to wait before attempt `attempt + 1`: rand() * min(cap, base * 2**(attempt - 1))."""
    exponent = max(attempt - 1, 0)
    ceiling = cap_s if exponent >= 64 else min(cap_s, base_s * 2**exponent)
    return rand() * ceiling
