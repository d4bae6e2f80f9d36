"""Start rates as people write them ("20/s", "600/m", "100/h") and as the store keeps them.

A rate option holds starts per second (a number, as every option does); its sliding window is
the shortest of a second, a minute and an hour in which it is a whole number of starts, so
"10/m" is 10 starts in any 60 s and "60/m" is 1 start in any second (stricter, never looser).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

#: Seconds of each unit a rate may name.
UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}
_TEXT = re.compile(r"\s*(\d+(?:\.\d+)?)\s*/\s*([smh])\s*")
#: How close to a whole number a rate times a window must be to count as one.
_WHOLE = 1e-6


@dataclass(frozen=True)
class Window:
    """At most `starts` starts in any `seconds` (a sliding window)."""

    starts: int
    seconds: float


def per_second(raw: object) -> float | None:
    """Starts per second from "N/s", "N/m", "N/h" or a number; None when it is neither."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int | float):
        return float(raw) if math.isfinite(raw) else None
    if not isinstance(raw, str):
        return None
    match = _TEXT.fullmatch(raw)
    if match is None:
        try:
            value = float(raw.strip())
        except ValueError:
            return None
        return value if math.isfinite(value) else None
    return float(match.group(1)) / UNITS[match.group(2)]


def window(rate_per_s: float) -> Window:
    """The sliding window of a rate: the shortest unit in which it is whole; else an hour's
    whole starts rounded down (at least one)."""
    for seconds in UNITS.values():
        starts = rate_per_s * seconds
        if starts >= 1 - _WHOLE and abs(starts - round(starts)) < _WHOLE:
            return Window(round(starts), seconds)
    return Window(max(1, math.floor(rate_per_s * UNITS["h"])), UNITS["h"])


def shown(rate_per_s: float | None) -> str | None:
    """A rate as people write it ("10/m"), or None for no limit."""
    if rate_per_s is None:
        return None
    limit = window(rate_per_s)
    unit = next(name for name, seconds in UNITS.items() if seconds == limit.seconds)
    return f"{limit.starts}/{unit}"
