"""Time to full speed after a fault: when the fleet finishes tasks at its earlier rate again.

The rate before is the number of tasks that finished in the BEFORE_S seconds before the fault
began, per second; the fleet is back to full speed at the end of the first WINDOW_S window,
starting once the fault has ended, in which tasks finished at SHARE of that rate or more. The
figure counts from the fault's start, so it includes the fault itself (a failover's fence and
promotion) and every reconnection after it.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

BEFORE_S = 5.0
WINDOW_S = 1.0
SHARE = 0.8
STEP_S = 0.1


def rate_before(finished: list[float], started: float) -> float:
    """Tasks finished per second in the BEFORE_S seconds before `started` (`finished` sorted)."""
    return (bisect.bisect_left(finished, started)
            - bisect.bisect_left(finished, started - BEFORE_S)) / BEFORE_S


def time_to_full_speed(finish_times: Iterable[float], *, started: float,
                       ended: float) -> float | None:
    """Seconds from `started` to full speed again (see the module), or None if the fleet never
    got back to it, or ran nothing before the fault to compare with. Unix seconds."""
    finished = sorted(finish_times)
    needed = SHARE * rate_before(finished, started) * WINDOW_S
    if needed <= 0 or not finished:
        return None
    window = ended
    while window + WINDOW_S <= finished[-1]:
        count = (bisect.bisect_left(finished, window + WINDOW_S)
                 - bisect.bisect_left(finished, window))
        if count >= needed:
            return window + WINDOW_S - started
        window += STEP_S
    return None
