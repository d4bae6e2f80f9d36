"""Worker hosts of their own: a Linux network namespace per host, joined to this machine by a
veth pair, so a remote worker reaches the API over a link that a test can take down.

Each host gets a /30 of 10.200.0.0/16: the root namespace's end of the pair (`gateway`) and the
host's end (`address`). Whatever should be reachable from the host listens on `gateway` (the API,
or a proxy in front of it). A process runs on the host through `ip netns exec`, which execs it
in place: its pid is the one the caller started. `link_down()` sets the root end down, so the
host's packets go nowhere and its connections hang, as when a switch port or a cable goes.

Names carry the pid of the process that made them (`atf-<pid>-<n>`), and a new host first
deletes the namespaces of processes that no longer run, so even a SIGKILLed test run leaves
nothing behind for long. Deleting a namespace deletes its end of the pair, and with it the
other end.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import logging
import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from functools import cache
from pathlib import Path

logger = logging.getLogger(__name__)

#: Where the hosts' /30 networks come from.
SUBNET = ipaddress.ip_network("10.200.0.0/16")
#: Serialises the choice of a free network and of names between processes.
LOCK_PATH = Path("/tmp/atf-netns.lock")
PREFIX = "atf-"


class NamespacesUnavailable(RuntimeError):
    """Network namespaces cannot be made on this machine (the message says why)."""


def _ip(*args: str, check: bool = True) -> str:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise NamespacesUnavailable(f"`ip {' '.join(args)}` failed: {result.stderr.strip()}")
    return result.stdout


@cache
def unavailable() -> str | None:
    """Why worker hosts cannot be made here, or None when they can (checked once, by making
    and deleting a namespace)."""
    if shutil.which("ip") is None:
        return ("iproute2's `ip` is not installed "
                "(`python scripts/ensure_services.py iproute2` installs it)")
    if os.geteuid() != 0:
        return ("network namespaces need root (`ip netns add`); this process runs as uid "
                f"{os.geteuid()}")
    probe = f"{PREFIX}{os.getpid()}-probe"
    try:
        _ip("netns", "add", probe)
    except NamespacesUnavailable as exc:
        return str(exc)
    _ip("netns", "del", probe, check=False)
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _sweep_stale() -> None:
    """Delete the namespaces of processes that ended without deleting them."""
    for line in _ip("netns", "list").splitlines():
        name = line.split()[0] if line.split() else ""
        parts = name.removeprefix(PREFIX).split("-")
        if name.startswith(PREFIX) and parts[0].isdigit() and not _alive(int(parts[0])):
            logger.info("deleting network namespace %s of an ended process", name)
            _kill_inside(name)
            _ip("netns", "del", name, check=False)


def _kill_inside(namespace: str) -> None:
    for pid in _ip("netns", "pids", namespace, check=False).split():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), 9)


def _free_network() -> tuple[int, ipaddress.IPv4Network]:
    """The first /30 of SUBNET with no address of this machine in it, and its index."""
    used = {ipaddress.ip_network(word, strict=False).supernet(new_prefix=30)
            for word in _ip("-o", "-4", "addr", "show").split()
            if "/" in word and ipaddress.ip_interface(word).ip in SUBNET}
    for index, network in enumerate(SUBNET.subnets(new_prefix=30)):
        if network not in used:
            return index, network  # type: ignore[return-value]
    raise NamespacesUnavailable(f"no free /30 left in {SUBNET}")


class WorkerHost:
    """One worker host: a network namespace and a veth pair to the root namespace."""

    def __init__(self) -> None:
        if reason := unavailable():
            raise NamespacesUnavailable(reason)
        with open(LOCK_PATH, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            _sweep_stale()
            index, network = _free_network()
            self.name = f"{PREFIX}{os.getpid()}-{index}"
            self.outside, inside = f"atf{index}o", f"atf{index}i"  # at most 15 characters
            self.gateway, self.address = (str(host) for host in network.hosts())
            _ip("netns", "add", self.name)
            try:
                _ip("link", "add", self.outside, "type", "veth", "peer", "name", inside,
                    "netns", self.name)
                _ip("addr", "add", f"{self.gateway}/30", "dev", self.outside)
                _ip("link", "set", self.outside, "up")
                _ip("-n", self.name, "addr", "add", f"{self.address}/30", "dev", inside)
                _ip("-n", self.name, "link", "set", inside, "up")
                _ip("-n", self.name, "link", "set", "lo", "up")
            except NamespacesUnavailable:
                self.close()
                raise
        logger.info("worker host %s: %s, reaching this machine at %s", self.name, self.address,
                    self.gateway)

    def command(self, argv: Sequence[str]) -> list[str]:
        """`argv` run on this host (`ip netns exec` execs it: the pid stays the same)."""
        return ["ip", "netns", "exec", self.name, *argv]

    def link_down(self) -> None:
        """Take the link down: the host's packets are dropped, its connections hang."""
        _ip("link", "set", self.outside, "down")

    def link_up(self) -> None:
        _ip("link", "set", self.outside, "up")

    def close(self) -> None:
        """Kill what still runs on the host, delete its namespace (and so its link)."""
        _kill_inside(self.name)
        _ip("netns", "del", self.name, check=False)
        _ip("link", "del", self.outside, check=False)  # already gone with the namespace


@contextlib.contextmanager
def worker_hosts(count: int) -> Iterator[list[WorkerHost]]:
    """`count` worker hosts, deleted on the way out whatever happened."""
    hosts: list[WorkerHost] = []
    try:
        for _ in range(count):
            hosts.append(WorkerHost())
        yield hosts
    finally:
        for host in hosts:
            host.close()
