"""A CPU quota for a group of processes: a cgroup (v1 `cpu` controller) of the bench's own.

`CpuQuota(name, cores)` makes /sys/fs/cgroup/cpu/<name>; from `limit()` on, its
`cpu.cfs_quota_us` is `cores` periods' worth of each scheduling period, so that everything in
it together runs at most `cores` CPUs however many it asks for (before, it runs unlimited: a
cluster's set-up, its migrations, need not crawl). A process started through `launcher()`
enters the group before it executes anything, so whatever it forks (a postmaster, then its
backends) is in it too. `throttled_s()` reads how long the group was held back (`cpu.stat`):
a quota that never throttled did not bind. On leaving, processes still in the group go back to
the root group and the group is removed.

Needs root and the v1 `cpu` hierarchy mounted at /sys/fs/cgroup/cpu (a cgroup v2 machine
offers `cpu.max` instead, which this does not drive).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from types import TracebackType

#: The v1 `cpu` controller's hierarchy.
HIERARCHY = Path("/sys/fs/cgroup/cpu")


class QuotaUnavailable(RuntimeError):
    """The machine offers no cgroup this process may make (not root, or no v1 `cpu`)."""


class CpuQuota:
    """A cgroup whose processes share `cores` CPUs; a context manager that makes it and
    removes it."""

    def __init__(self, name: str, cores: float) -> None:
        if cores <= 0:
            raise ValueError(f"a CPU quota needs a positive number of cores, not {cores}")
        self.path = HIERARCHY / name
        self.cores = cores

    def __enter__(self) -> CpuQuota:
        if not (HIERARCHY / "cgroup.procs").exists():
            raise QuotaUnavailable(f"no cgroup v1 cpu hierarchy at {HIERARCHY}: the CPU "
                                   "quotas need it")
        try:
            self.path.mkdir()
        except OSError as exc:
            raise QuotaUnavailable(f"cannot make the cgroup {self.path} ({exc.strerror}): "
                                   "the CPU quotas need root") from None
        return self

    def limit(self) -> None:
        """Hold the group's processes to `cores` CPUs from now on."""
        period = int((self.path / "cpu.cfs_period_us").read_text())
        (self.path / "cpu.cfs_quota_us").write_text(str(round(self.cores * period)))

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 trace: TracebackType | None) -> None:
        for pid in self.pids():  # a process still running leaves the group before it goes
            with contextlib.suppress(OSError):
                (HIERARCHY / "cgroup.procs").write_text(str(pid))
        self.path.rmdir()

    def launcher(self) -> list[str]:
        """An argv prefix that runs a command inside the group (it enters, then `exec`s)."""
        return ["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.path / "cgroup.procs")]

    def pids(self) -> list[int]:
        """The processes in the group now."""
        return [int(line) for line in (self.path / "cgroup.procs").read_text().split()]

    def throttled_s(self) -> float:
        """Seconds the group's processes were held back by the quota so far."""
        fields = dict(line.split() for line in (self.path / "cpu.stat").read_text()
                      .splitlines())
        return int(fields["throttled_time"]) / 1e9


def available() -> bool:
    """Whether this process can make CPU quotas here."""
    return os.geteuid() == 0 and (HIERARCHY / "cgroup.procs").exists()
