"""A producer process: `python -m bench.producer SYSTEM SPEC_JSON`; prints a JSON line.

It runs in the system's own environment (the peers' venv, or the project's for ATF), so
each system is driven through its normal public API. SPEC: {"task": "record"|"noop", "key",
"n", "mode": "burst"|"bulk"|"paced"|"delayed"|"in_transaction"|"release", "rate" (paced),
"delay_min", "delay_max" (delayed, seconds), "run_at" (release: the epoch second at which
every task falls due), "chunk" (bulk: tasks per call, at most CHUNK, the default)}. Only the
enqueue loop is timed. The last two modes are ATF's: `in_transaction` makes its one call per
task inside one open transaction of the caller's.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from bench import drivers

#: Tasks per bulk call (ATF's batch limit; the others take any number).
CHUNK = 1000


def _paced(client: Any, spec: dict) -> None:
    interval = 1.0 / spec["rate"]
    begin = time.monotonic()
    for index in range(spec["n"]):
        pause = begin + index * interval - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        client.send(spec["task"], spec["key"], time.time(), None)


def _delayed(client: Any, spec: dict) -> None:
    """Due times spread evenly from `delay_min` to `delay_max` ahead of the first send; a task
    that a slow producer sends later than `delay_min` before its time is due `delay_min` after
    it is sent, so that lateness is the system's, not the producer's."""
    n, low, high = spec["n"], spec["delay_min"], spec["delay_max"]
    base = time.time()
    for index in range(n):
        due = max(base + low + (high - low) * index / n, time.time() + low)
        client.send(spec["task"], spec["key"], due, due)


def _bulk(client: Any, spec: dict) -> None:
    dues = [0.0] * spec["n"]
    sender = getattr(client, "send_many", None) or client.backlog
    chunk = spec.get("chunk", CHUNK)
    for begin in range(0, len(dues), chunk):
        sender(spec["task"], spec["key"], dues[begin:begin + chunk])


def _release(client: Any, spec: dict) -> None:
    for begin in range(0, spec["n"], CHUNK):
        client.send_many(spec["task"], spec["key"], [0.0] * min(CHUNK, spec["n"] - begin),
                         run_at=spec["run_at"])


def _burst(client: Any, spec: dict) -> None:
    for _ in range(spec["n"]):
        client.send(spec["task"], spec["key"], 0.0, None)


def _in_transaction(client: Any, spec: dict) -> None:
    with client.transaction():
        _burst(client, spec)


MODES = {"burst": _burst, "bulk": _bulk, "paced": _paced, "delayed": _delayed,
         "in_transaction": _in_transaction, "release": _release}


def main(argv: list[str]) -> None:
    system, spec = argv[1], json.loads(argv[2])
    client = drivers.load(system).Client()
    started = time.perf_counter()
    MODES[spec["mode"]](client, spec)
    seconds = time.perf_counter() - started
    client.close()
    sys.stdout.write(json.dumps({"seconds": seconds, "n": spec["n"]}) + "\n")


if __name__ == "__main__":
    main(sys.argv)
