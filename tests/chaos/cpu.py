"""Processor seconds that groups of processes used, read from /proc (Linux), to tell how much of
the host's cores a run took and which of its processes took them."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

#: Clock ticks a second of /proc/<pid>/stat's times.
TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, processor seconds so far) of `pid`, None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # after "pid (name) "
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / TICKS


def _pids() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
            errors="replace")
    except OSError:
        return ""


def sample(roots: Mapping[str, int], database: str) -> Counter[str]:
    """Processor seconds so far, by group: each of `roots` (name: pid) with its descendants,
    and "postgres": the server processes of `database` alive now."""
    stats = {pid: stat for pid in _pids() if (stat := _stat(pid)) is not None}
    seconds: Counter[str] = Counter()
    group_of = {pid: name for name, pid in roots.items()}
    for pid in sorted(stats):  # a child's pid may be lower than its parent's: walk up instead
        ancestor, seen = pid, 0
        while ancestor not in group_of and ancestor in stats and seen < 64:
            ancestor, seen = stats[ancestor][0], seen + 1
        if ancestor in group_of:
            seconds[group_of[ancestor]] += stats[pid][1]
        elif f" {database} " in _command(pid) and _command(pid).startswith("postgres"):
            seconds["postgres"] += stats[pid][1]
    return seconds
