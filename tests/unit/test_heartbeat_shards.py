"""The heartbeat's budget per shard: a shard it cannot reach is timed on its own."""

from __future__ import annotations

import time
from collections.abc import Mapping

from tasks_core.shards import SLOT_SHIFT
from workers.buffer import WorkBuffer
from workers.heartbeat import HeartbeatThread
from workers.transport import Beat


class PartlyReached:
    """A transport whose heartbeats reach every shard but those of `down`."""

    def __init__(self) -> None:
        self.down: set[int] = set()

    def heartbeat(self, leases: Mapping[int, int], *, seen: bool = True) -> Beat:
        return Beat(lost=set(), unreached={pk for pk in leases if pk >> SLOT_SHIFT in self.down})

    def reset(self) -> None:
        pass


def test_a_heartbeat_that_misses_one_shard_times_that_shard_alone() -> None:
    on_one, on_two = 1 << SLOT_SHIFT | 5, 2 << SLOT_SHIFT | 6
    buffer = WorkBuffer(priorities=["default"], executors=2)
    buffer.put([])
    transport = PartlyReached()
    beats = HeartbeatThread(buffer=buffer, interval_s=1.0, transport=transport)  # type: ignore[arg-type]
    buffer.leases = lambda: {on_one: 1, on_two: 1}  # type: ignore[method-assign]
    assert beats.beat() is True and beats.unreached_for_s() == {}
    reached_s = time.monotonic()
    # When slot 1 stops answering, twice
    transport.down = {1}
    assert beats.beat() is False  # tried again within a second, as a failed one is
    time.sleep(0.05)
    assert beats.beat() is False
    # Then slot 1 is timed from the last heartbeat that reached it; the process is not silent
    (slot, unreached_s), = beats.unreached_for_s().items()
    assert slot == 1 and unreached_s >= time.monotonic() - reached_s > 0.05
    assert beats.silent_for_s() < unreached_s
    # And once it answers again, nothing is unreached
    transport.down = set()
    assert beats.beat() is True and beats.unreached_for_s() == {}
