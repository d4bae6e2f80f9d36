"""Free TCP ports on loopback for the servers the tests start (Redis, PgBouncer, PostgreSQL,
gunicorn, moto, ...).

A port is picked, then bound a moment later by the server: in between, another process could
pick the same one. Without xdist the kernel picks it (bind to port 0), as it always did. In a
parallel run (tests/parallel.py) each xdist worker takes its ports from a block of its own,
below Linux's ephemeral range (32768-60999 by default, where the kernel picks the ports of
bind(0) and of outgoing connections), so two workers never pick the same port, and no client
connection of anybody's takes one before its server binds it. Within a block the ports are
handed out in turn from an offset of this process's own (a worker and the runner it starts
share the block), each checked free by binding it.
"""

from __future__ import annotations

import itertools
import os
import socket

from tests.parallel import worker_number

#: Worker N's ports: FIRST + N * SPAN up to the next block (gw0: 20000-20999, gw7: 27000-27999).
FIRST, SPAN = 20000, 1000

_offsets = itertools.count(os.getpid() % SPAN)


def bindable(port: int) -> bool:
    """Whether `port` on loopback can be bound now (nobody listens on it)."""
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A TCP port on loopback that nobody listens on right now (see the module's docstring)."""
    number = worker_number()
    if number is None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            return int(probe.getsockname()[1])
    first = FIRST + number * SPAN
    for _ in range(SPAN):
        port = first + next(_offsets) % SPAN
        if bindable(port):
            return port
    raise RuntimeError(f"no free port left in {first}-{first + SPAN - 1} (xdist worker gw{number})")
