"""The system under test as real processes: the API (gunicorn), consumers and worker processes.

Each worker is its own `runworker --processes 1` child, so the runner can SIGKILL one and start
it again. A watcher thread restarts any child that exits without the runner asking (a
`demo.fail` crash task), and counts the exit codes it saw; a worker that cut itself off or
met a hung lambda replaces itself (workers/replacement.py) and needs no restart.
Worker 0 reaches PostgreSQL through a proxy (tests/proxy.py) so that its connection can be cut.
With a worker token, one more worker is remote (`runworker --api`, on settings without a
database) and reaches the API through a second proxy, so that its link can be cut too.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

from tests.chaos.services import free_port, wait_until
from tests.proxy import Proxy

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
#: Seconds before the watcher starts a child that exited on its own again.
RESTART_DELAY_S = 0.3
#: A log line that says a child is ready for work, per role.
READY = {
    "consumer": re.compile(r"consumer started"),
    "worker": re.compile(r"worker \S+ started"),
    "api": re.compile(r"Booting worker|Listening at"),
}
#: A worker's line when it ends its image for a fresh one (workers/replacement.py).
REPLACED = re.compile(r"replacing this worker process")


class Child:
    """One long-running process of the system, which can be killed and started again."""

    def __init__(self, role: str, index: int, command: list[str], env: Mapping[str, str],
                 log_dir: Path) -> None:
        self.role, self.index = role, index
        self.name = f"{role}-{index}"
        self.command = command
        self.env = dict(env)
        self.log_path = log_dir / f"{self.name}.log"
        self.process: subprocess.Popen | None = None
        self.held = False  #: a fault is handling this child; the watcher leaves it alone
        self._log_offset = 0

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def start(self) -> None:
        self._log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "a") as log:
            self.process = subprocess.Popen(self.command, cwd=ROOT, env=self.env, stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_text(self) -> str:
        """What this run of the child logged so far."""
        with open(self.log_path, "rb") as log:
            log.seek(self._log_offset)
            return log.read().decode(errors="replace")

    def ready(self) -> bool:
        """Whether this run of the child logged its ready line."""
        return self.alive() and bool(READY[self.role].search(self.log_text()))

    def replaced(self) -> bool:
        """Whether this run of the child ended its image and started a fresh one (same pid)."""
        return self.alive() and REPLACED.search(self.log_text()) is not None

    def back_after_replacement(self) -> bool:
        """Whether the fresh image of a replaced child logged its ready line."""
        text = self.log_text()
        replaced = REPLACED.search(text)
        return (replaced is not None and self.alive()
                and READY[self.role].search(text, replaced.end()) is not None)

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        wait_until(self.ready, timeout_s=timeout_s, what=f"{self.name} to start")

    def kill(self) -> int | None:
        """SIGKILL the child's whole process group; return its exit status."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        return self.process.wait(timeout=10)

    def terminate(self, timeout_s: float = 15.0) -> None:
        """SIGTERM, then SIGKILL after `timeout_s`."""
        if not self.alive():
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()


class Cluster:
    """The API, `consumers` consumers and `workers` worker processes of one run."""

    def __init__(self, *, env: Mapping[str, str], database_host: str, database_port: int,
                 workers: int, consumers: int, threads: int, log_dir: Path,
                 api: bool = True, worker_token: str | None = None) -> None:
        self.env = dict(env)
        self.log_dir = log_dir
        self.proxy = Proxy(database_host, database_port)
        manage = [sys.executable, str(ROOT / "manage.py")]
        self.api_port = free_port()
        self.api_proxy = Proxy("127.0.0.1", self.api_port)
        self.children: list[Child] = []
        if api:  # the project's gunicorn config (gthread, a database pool), one process
            gunicorn = str(Path(sys.executable).with_name("gunicorn"))
            self.children.append(Child("api", 0, [
                gunicorn, "-c", "python:atf_project.gunicorn_conf", "atf_project.wsgi",
                "--bind", f"127.0.0.1:{self.api_port}", "--log-level", "info",
            ], {**self.env, "WEB_CONCURRENCY": "1", "ATF_WEB_THREADS": "32"}, log_dir))
        for index in range(consumers):
            self.children.append(Child("consumer", index, [*manage, "runconsumer"], self.env,
                                       log_dir))
        for index in range(workers):
            env = self.env
            if index == 0:
                env = {**env, "DATABASE_URL": self._through_proxy(env["DATABASE_URL"])}
            self.children.append(Child("worker", index, [
                *manage, "runworker", "--processes", "1", "--threads", str(threads),
            ], env, log_dir))
        if api and worker_token:
            host_env = {key: value for key, value in self.env.items() if key != "DATABASE_URL"}
            self.children.append(Child("worker", workers, [
                *manage, "runworker", "--processes", "1", "--threads", str(threads),
                "--api", f"http://127.0.0.1:{self.api_proxy.port}",
            ], {**host_env, "DJANGO_SETTINGS_MODULE": "tests.remote_worker_settings",
                "ATF_API_TOKEN": worker_token}, log_dir))
        self.exits: Counter[str] = Counter()  #: "<role> exit <code>" seen by the watcher
        self._lock = threading.Lock()
        self._watching = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="ChildWatcher", daemon=True)

    def _through_proxy(self, url: str) -> str:
        return re.sub(r"@[^/]+/", f"@127.0.0.1:{self.proxy.port}/", url)

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def remote_worker(self) -> Child | None:
        """The worker that reaches ATF through the API, if the run has one."""
        return next((child for child in self.role("worker") if "--api" in child.command), None)

    def role(self, role: str) -> list[Child]:
        return [child for child in self.children if child.role == role]

    def start(self) -> None:
        for child in self.children:
            child.start()
        for child in self.children:
            child.wait_ready()
        self._watching.set()
        self._watcher.start()

    def _watch(self) -> None:
        while self._watching.is_set():
            with self._lock:
                for child in self.children:
                    if child.held or child.process is None or child.process.poll() is None:
                        continue
                    code = child.process.returncode
                    self.exits[f"{child.role} exit {code}"] += 1
                    logger.info("%s exited with %s on its own; starting it again", child.name,
                                code)
                    time.sleep(RESTART_DELAY_S)
                    child.start()
            time.sleep(0.1)

    def hold(self, child: Child) -> None:
        """Take a child away from the watcher (a fault is about to kill it)."""
        with self._lock:
            child.held = True

    def release(self, child: Child, *, restart: bool = True) -> None:
        with self._lock:
            if restart and not child.alive():
                child.start()
            child.held = False

    def rss_by_role(self) -> dict[str, int]:
        """Resident memory in bytes of each role's processes (their descendants included)."""
        totals: Counter[str] = Counter()
        tree = _process_tree()
        for child in self.children:
            if child.pid is not None:
                totals[child.role] += sum(_rss(pid) for pid in _descendants(child.pid, tree))
        return dict(totals)

    def stop(self) -> None:
        self._watching.clear()
        if self._watcher.is_alive():
            self._watcher.join(5)
        for child in self.children:
            if child.alive():
                os.killpg(child.process.pid, signal.SIGTERM)
        for child in self.children:
            child.terminate(timeout_s=15)
        self.proxy.close()
        self.api_proxy.close()


def _process_tree() -> dict[int, list[int]]:
    """Parent pid -> child pids, from /proc."""
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def _descendants(pid: int, tree: Mapping[int, list[int]]) -> list[int]:
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(tree.get(current, []))
    return found


def _rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0
