"""The benchmark's producer: delayed tasks are due ahead of their send, however slow it is."""

import time

from bench import producer


class _SlowClient:
    """Takes `pause_s` a send, as a producer against a throttled store does; notes each send."""

    def __init__(self, pause_s: float) -> None:
        self.pause_s = pause_s
        self.sends: list[tuple[float, float]] = []  #: (when sent, due)

    def send(self, task: str, key: str, due: float, run_at: float) -> None:
        time.sleep(self.pause_s)
        self.sends.append((time.time(), run_at))


SPEC = {"task": "record", "key": "late", "n": 20, "delay_min": 0.05, "delay_max": 0.25}


def test_a_fast_producer_spreads_the_due_times_evenly_over_the_window():
    client = _SlowClient(0.0)
    producer._delayed(client, SPEC)
    dues = [due for _sent, due in client.sends]
    steps = [later - earlier for earlier, later in zip(dues, dues[1:], strict=False)]
    assert min(steps) > 0.009 and max(steps) < 0.011  # (0.25 - 0.05) / 20 apart
    assert dues[-1] - dues[0] < 0.2


def test_a_slow_producer_sends_every_task_at_least_the_shortest_delay_before_it_is_due():
    client = _SlowClient(0.02)  # 20 sends take 0.4 s: the window's late tasks would be sent late
    producer._delayed(client, SPEC)
    # Sent is noted after the send returned; the due time was fixed just before it.
    assert all(due - sent >= SPEC["delay_min"] - 0.03 for sent, due in client.sends)
    assert client.sends[-1][1] - client.sends[0][1] > 0.25  # the window stretched instead
