"""The system under test as real processes: the API (gunicorn), consumers and worker processes.

Each worker is its own `runworker --processes 1` child, so the runner can SIGKILL one and start
it again. A watcher thread restarts any child that exits without the runner asking (a
`demo.fail` crash task), and counts the exit codes it saw; a worker that cut itself off or
met a hung lambda replaces itself (workers/replacement.py) and needs no restart.
Worker 0 reaches PostgreSQL through a proxy (tests/proxy.py) so that its connection can be cut;
one per node when the run has a primary and a standby, so that its multi-host URL still finds
the primary after a failover; with shards (tests/chaos/sharding.py), through proxies to each
shard's nodes too, so that its link to one shard alone can be cut.
With a worker token, `remote_workers` more workers are remote (`runworker --api`, on settings
without a database), each on a worker host of its own: a network namespace with a veth link to
this machine (tests/netns.py), which the runner can take down. A remote worker reaches the API
through a proxy on its host's gateway (which the runner can cut, or hang), and the lambdas'
Redis through another. Where namespaces cannot be made, remote workers run on loopback behind
the same proxies, and the faults that need a host say why they cannot run.
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
import urllib.request
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

from atf_project import database_url
from tests import netns
from tests.chaos.services import wait_until
from tests.ports import free_port
from tests.proxy import Proxy
from workers.replacement import REPLACING

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
        """Whether this run of the child serves: its latest image (the fresh one after its
        last replacement, if any) logged its ready line. A fault that waits for it never
        starts on a child still waiting to come back from an earlier fault."""
        text = self.log_text()
        latest = max(text.rfind(REPLACING), 0)
        return self.alive() and READY[self.role].search(text, latest) is not None

    def replacements(self) -> int:
        """How often this run of the child ended its image for a fresh one (same pid). A fault
        compares it with the count before it: an earlier replacement proves nothing."""
        return self.log_text().count(REPLACING)

    def back_after_replacement(self) -> bool:
        """Whether the fresh image of the child's latest replacement logged its ready line."""
        return REPLACING in self.log_text() and self.ready()

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


class RemoteHost:
    """Where a remote worker runs: a worker host of its own (None: loopback), and its links
    through proxies on the host's gateway: to the API, and to the lambdas' Redis."""

    def __init__(self, host: netns.WorkerHost | None, *, api_port: int, redis_url: str) -> None:
        self.host = host
        listen = host.gateway if host else "127.0.0.1"
        self.api = Proxy("127.0.0.1", api_port, listen_host=listen)
        redis_port = int(redis_url.rsplit(":", 1)[1].split("/")[0])
        self.redis = Proxy("127.0.0.1", redis_port, listen_host=listen)
        self.redis_url = f"redis://{listen}:{self.redis.port}/0"
        self.api_url = f"http://{listen}:{self.api.port}"

    def command(self, argv: list[str]) -> list[str]:
        return self.host.command(argv) if self.host else argv

    def close(self) -> None:
        self.api.close()
        self.redis.close()
        if self.host:
            self.host.close()


class Proxies:
    """A proxy to each database node, cut and restored together."""

    def __init__(self, nodes: Sequence[tuple[str, int]]) -> None:
        self.each = [Proxy(host, port) for host, port in nodes]

    @property
    def netloc(self) -> str:
        return ",".join(f"127.0.0.1:{proxy.port}" for proxy in self.each)

    def through(self, url: str) -> str:
        """`url` with its hosts replaced by these proxies."""
        return re.sub(r"@[^/]+/", f"@{self.netloc}/", url, count=1)

    def cut(self) -> None:
        for proxy in self.each:
            proxy.cut()

    def drop(self) -> int:
        """Close every connection through these proxies, and each new one, until restored."""
        return sum(proxy.drop() for proxy in self.each)

    def restore(self) -> None:
        for proxy in self.each:
            proxy.restore()

    def close(self) -> None:
        for proxy in self.each:
            proxy.close()


class Cluster:
    """The API, `consumers` consumers, `workers` direct worker processes and (with a worker
    token) `remote_workers` remote ones of one run."""

    def __init__(self, *, env: Mapping[str, str], database_nodes: Sequence[tuple[str, int]],
                 workers: int, consumers: int, threads: int, log_dir: Path,
                 api: bool = True, web_processes: int = 1, web_threads: int = 32,
                 worker_token: str | None = None, remote_workers: int = 1,
                 shard_nodes: Sequence[Sequence[tuple[str, int]]] = ()) -> None:
        self.env = dict(env)
        self.log_dir = log_dir
        self.proxy = Proxies(database_nodes)
        #: Worker 0's links to each shard, by slot (none without shards).
        self.shard_proxies = [Proxies(nodes) for nodes in shard_nodes]
        manage = [sys.executable, str(ROOT / "manage.py")]
        self.api_port = free_port()
        self.children: list[Child] = []
        #: Why remote workers run on loopback, not on hosts of their own (None: they do not).
        self.no_hosts = netns.unavailable()
        self.remote_hosts: dict[str, RemoteHost] = {}  #: by the remote worker child's name
        remotes = [RemoteHost(None if self.no_hosts else netns.WorkerHost(),
                              api_port=self.api_port, redis_url=self.env["REDIS_URL"])
                   for _ in range(remote_workers if api and worker_token else 0)]
        if api:  # the project's gunicorn config (gthread, a database pool)
            gunicorn = str(Path(sys.executable).with_name("gunicorn"))
            allowed = ",".join([self.env.get("DJANGO_ALLOWED_HOSTS", "127.0.0.1"),
                                *(remote.host.gateway for remote in remotes if remote.host)])
            self.children.append(Child("api", 0, [
                gunicorn, "-c", "python:atf_project.gunicorn_conf", "atf_project.wsgi",
                "--bind", f"127.0.0.1:{self.api_port}", "--log-level", "info",
            ], {**self.env, "WEB_CONCURRENCY": str(web_processes),
                "ATF_WEB_THREADS": str(web_threads),
                "DJANGO_ALLOWED_HOSTS": allowed}, log_dir))
        for index in range(consumers):
            self.children.append(Child("consumer", index, [*manage, "runconsumer"], self.env,
                                       log_dir))
        for index in range(workers):
            env = self.env
            if index == 0:
                env = {**env, "DATABASE_URL": self.proxy.through(env["DATABASE_URL"])}
                if self.shard_proxies:
                    urls = database_url.split_list(env["ATF_SHARD_URLS"])
                    env["ATF_SHARD_URLS"] = ",".join(
                        proxies.through(url)
                        for proxies, url in zip(self.shard_proxies, urls, strict=True))
            self.children.append(Child("worker", index, [
                *manage, "runworker", "--processes", "1", "--threads", str(threads),
            ], env, log_dir))
        host_env = {key: value for key, value in self.env.items()
                    if key not in ("DATABASE_URL", "ATF_SHARD_URLS")}
        for index, remote in enumerate(remotes, start=workers):
            child = Child("worker", index, remote.command([
                *manage, "runworker", "--processes", "1", "--threads", str(threads),
                "--api", remote.api_url,
            ]), {**host_env, "DJANGO_SETTINGS_MODULE": "tests.remote_worker_settings",
                 "ATF_API_TOKEN": worker_token or "", "REDIS_URL": remote.redis_url}, log_dir)
            self.children.append(child)
            self.remote_hosts[child.name] = remote
        self.exits: Counter[str] = Counter()  #: "<role> exit <code>" seen by the watcher
        self._lock = threading.Lock()
        self._watching = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="ChildWatcher", daemon=True)

    @property
    def database_links(self) -> list[Proxies]:
        """Worker 0's links to every database: control, and each shard."""
        return [self.proxy, *self.shard_proxies]

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def remote_workers(self) -> list[tuple[Child, RemoteHost]]:
        """The workers that reach ATF through the API, with their hosts."""
        return [(child, self.remote_hosts[child.name]) for child in self.role("worker")
                if child.name in self.remote_hosts]

    def api_answers(self) -> bool:
        """Whether the API answers its health check now."""
        try:
            with urllib.request.urlopen(f"{self.api_url}/healthz", timeout=2) as answer:
                return answer.status == 200
        except OSError:
            return False

    def role(self, role: str) -> list[Child]:
        return [child for child in self.children if child.role == role]

    def start(self) -> None:
        """The API first (remote workers ask it for their lambdas as they start), then the rest."""
        for api_first in (True, False):
            started = [child for child in self.children if (child.role == "api") == api_first]
            for child in started:
                child.start()
            for child in started:
                child.wait_ready()
            if api_first and started:
                wait_until(self.api_answers, timeout_s=60, what="the API to answer")
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
        """The API last: a remote worker still shutting down heartbeats through it, and one
        that the API stopped answering first replaced itself at the end of every run."""
        self._watching.clear()
        if self._watcher.is_alive():
            self._watcher.join(5)
        for api_last in (False, True):
            stopping = [child for child in self.children if (child.role == "api") == api_last]
            for child in stopping:
                if child.alive():
                    os.killpg(child.process.pid, signal.SIGTERM)
            for child in stopping:
                child.terminate(timeout_s=15)
        for proxies in self.database_links:
            proxies.close()
        for remote in self.remote_hosts.values():
            remote.close()


def web_processes(api: Child) -> set[int]:
    """The pids of the API's gunicorn worker processes (its master's children)."""
    return set(_process_tree().get(api.pid or 0, []))


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
