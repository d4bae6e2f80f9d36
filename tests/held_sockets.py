"""The TCP connections a process holds, by the port they go to (Linux's /proc).

What a client holds, read on the client's side: the server's list of sessions
(pg_stat_activity) lags it, since a session the client closed stays listed until its backend
has exited, which on a busy machine can outlast the client's next connection.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from pathlib import Path

#: /proc/net/tcp's state of a listening socket (a server's, never a connection).
LISTEN = "0A"
SOCKET_PREFIX = "socket:["


def socket_inodes(pid: int) -> set[int]:
    """The inodes of the sockets process `pid` has open."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):  # closed since the listing
            target = os.readlink(fd)
            if target.startswith(SOCKET_PREFIX):
                inodes.add(int(target[len(SOCKET_PREFIX):-1]))
    return inodes


def connections_to(pid: int, ports: Sequence[int]) -> list[int]:
    """How many TCP connections process `pid` holds (made, or being made) to each of `ports`.

    A connection closed between the two reads is not counted (a socket the process closed
    no longer carries its inode), nor one opened between them: a reading errs low, never high.
    Each socket counts once, by its inode: the kernel writes the table in pieces, so a socket
    may be listed twice while other sockets come and go (a pool of one connection read as two).
    """
    inodes = socket_inodes(pid)
    held: dict[int, set[int]] = {port: set() for port in ports}
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            port, inode = int(fields[2].rsplit(":", 1)[1], 16), int(fields[9])
            if port in held and fields[3] != LISTEN and inode in inodes:
                held[port].add(inode)
    return [len(held[port]) for port in ports]
