"""Starting, sampling and stopping the processes of one system (workers, consumer, API)."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from bench import stats

if TYPE_CHECKING:
    from bench.drivers.base import Command

logger = logging.getLogger(__name__)

LOG_DIR = Path(__file__).resolve().parent / "results" / "logs"
SAMPLE_INTERVAL_S = 0.2
STOP_GRACE_S = 15.0


def run_once(command: Command, *, timeout_s: float = 600.0) -> str:
    """Run a command to its end; return its stdout, raise with its stderr if it failed."""
    done = subprocess.run(command.argv, env={**os.environ, **command.env}, capture_output=True,
                          text=True, timeout=timeout_s, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command.argv)} failed: {done.stderr[-2000:]}")
    return done.stdout


def tree_usage(process: psutil.Process) -> tuple[int, float]:
    """Resident bytes, and CPU seconds (user + system) used so far, of a process and all its
    descendants, in one walk of the tree; the CPU includes ended and reaped descendants
    (through their parents' children's times)."""
    rss, cpu = 0, 0.0
    for member in [process, *process.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):  # it may end while we look
            rss += member.memory_info().rss
            times = member.cpu_times()
            cpu += times.user + times.system + times.children_user + times.children_system
    return rss, cpu


class Fleet:
    """The long-running processes of one system; tracks each role's peak RSS while it runs,
    and the peak of them all together, and samples each role's CPU time (and that of the
    servers it `watch`es) so that a measurement can tell the CPU spent between two moments."""

    def __init__(self, name: str, commands: list[Command]) -> None:
        self.name = name
        self.commands = commands
        self.popens: list[tuple[str, subprocess.Popen]] = []
        self.peak_rss: dict[str, int] = {}
        self.peak_total = 0  #: the peak of all the processes' RSS together (one sample)
        #: Per role (servers watched included), (time.time(), CPU seconds) samples.
        self.cpu_samples: dict[str, list[tuple[float, float]]] = {}
        #: Servers not started here whose CPU is sampled too: role -> pid.
        self.watched: dict[str, int] = {}
        self.started_at = datetime.now(UTC)  #: when the processes were (last) started
        self.sampling = False
        self.sampler = threading.Thread(target=self._sample_loop, name="RssSampler", daemon=True)

    def __enter__(self) -> Fleet:
        self.started_at = datetime.now(UTC)
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        for index, command in enumerate(self.commands):
            log = open(LOG_DIR / f"{self.name}-{command.role}-{index}.log", "ab")  # noqa: SIM115
            popen = subprocess.Popen(command.argv, env={**os.environ, **command.env},
                                     stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
            log.close()
            self.popens.append((command.role, popen))
        self.sampling = True
        self.sampler.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.sampling = False
        self.sampler.join()
        self.stop()

    def check_alive(self) -> None:
        for role, popen in self.popens:
            if popen.poll() is not None:
                raise RuntimeError(f"{self.name} {role} exited with {popen.returncode}; "
                                   f"see {LOG_DIR}")

    def watch(self, role: str, pid: int) -> None:
        """Sample the CPU of a server's process tree (a database, Redis) under `role`."""
        self.watched[role] = pid

    def _sample_loop(self) -> None:
        while self.sampling:
            self._sample()
            time.sleep(SAMPLE_INTERVAL_S)
        self._sample()  # the last moment the processes ran: a measurement ends before it

    def _sample(self) -> None:
        totals: dict[str, int] = {}
        cpu: dict[str, float] = {}
        for role, popen in self.popens:
            try:
                process = psutil.Process(popen.pid)
                rss, seconds = tree_usage(process)
            except psutil.Error:
                continue
            totals[role] = totals.get(role, 0) + rss
            cpu[role] = cpu.get(role, 0.0) + seconds
        for role, pid in self.watched.items():
            with contextlib.suppress(psutil.Error):
                cpu[role] = tree_usage(psutil.Process(pid))[1]
        now = time.time()
        for role, seconds in cpu.items():
            self.cpu_samples.setdefault(role, []).append((now, seconds))
        for role, rss in totals.items():
            self.peak_rss[role] = max(self.peak_rss.get(role, 0), rss)
        self.peak_total = max(self.peak_total, sum(totals.values()))

    def cpu_between(self, start: float, end: float) -> dict[str, float]:
        """CPU seconds each role used between two `time.time()` moments."""
        return {role: stats.value_at(samples, end) - stats.value_at(samples, start)
                for role, samples in self.cpu_samples.items() if samples}

    def connections_to(self, port: int) -> dict[str, int]:
        """TCP connections each role's processes (their descendants included) hold to `port`."""
        held: dict[str, int] = {}
        for role, popen in self.popens:
            with contextlib.suppress(psutil.Error):
                root = psutil.Process(popen.pid)
                for member in (root, *root.children(recursive=True)):
                    with contextlib.suppress(psutil.Error):
                        held[role] = held.get(role, 0) + sum(
                            1 for conn in member.net_connections(kind="tcp")
                            if conn.raddr and conn.raddr.port == port)
        return held

    def stop(self) -> None:
        """SIGTERM each process group we started, then SIGKILL what is left after a grace."""
        for _role, popen in self.popens:
            if popen.poll() is None:
                os.killpg(popen.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for role, popen in self.popens:
            try:
                popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                logger.warning("%s %s did not stop in %ss; killing it", self.name, role,
                               STOP_GRACE_S)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(popen.pid, signal.SIGKILL)  # also any orphaned child in its group
            popen.wait()
