"""One driver module per system. Each module defines:

- ``NAME``, ``LABEL``, ``OPTIONS`` (the reliability options, printed with the results),
  ``DURABLE`` (every task state in a database), ``HAS_BULK``, ``SCHEMA`` (tables to empty);
- ``setup_commands(env)`` and ``worker_commands(env)``: the processes the runner starts;
- ``Client``: used inside a producer process (``python -m bench.producer``) to enqueue;
- ``records(client, key)``: (due, start, end) of each finished task, read from Redis.
"""

from __future__ import annotations

import importlib
from types import ModuleType

#: Every system, ours first; the order in which runs interleave.
NAMES = ("atf", "celery", "rq", "dramatiq", "huey", "procrastinate", "djtasks")


def load(name: str) -> ModuleType:
    """The driver module of system `name`."""
    return importlib.import_module(f"bench.drivers.{name}")
