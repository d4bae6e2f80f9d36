"""The heartbeat's budget per shard: a shard it cannot reach is timed on its own; and its
cadence."""

from __future__ import annotations

import itertools
import threading
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


class SlowToAnswer:
    """A transport whose heartbeats take `answer_s` each; when each began."""

    def __init__(self, answer_s: float, count: int) -> None:
        self.answer_s = answer_s
        self.began: list[float] = []
        self.count = count
        self.enough = threading.Event()

    def heartbeat(self, leases: Mapping[int, int], *, seen: bool = True) -> Beat:
        self.began.append(time.monotonic())
        if len(self.began) >= self.count:
            self.enough.set()
        time.sleep(self.answer_s)  # the API (or the store) taking its time to answer
        return Beat(lost=set())

    def reset(self) -> None:
        pass


def test_heartbeats_begin_an_interval_apart_however_long_each_takes_to_answer() -> None:
    """The budget (three intervals) counts from the start of the last successful heartbeat:
    one that began an interval after the previous one's answer left a remote worker, whose
    answers took 0.4 s of a 0.5 s interval, one try instead of two before the budget ended."""
    buffer = WorkBuffer(priorities=["default"], executors=1)
    transport = SlowToAnswer(answer_s=0.4, count=4)
    beats = HeartbeatThread(buffer=buffer, interval_s=0.5, transport=transport)  # type: ignore[arg-type]
    beats.start()
    try:
        assert transport.enough.wait(10)
    finally:
        beats.stop()
    gaps = [later - earlier for earlier, later in itertools.pairwise(transport.began)]
    assert max(gaps) < 0.8, gaps  # an interval apart (0.5 s), not interval + answer (0.9 s)
