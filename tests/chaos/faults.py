"""The faults the runner injects, each a function that does it and says what happened.

Every fault returns a FaultEvent: when it began and ended (Unix seconds, for the latency
windows), whether it did what it should (`ok`; a cut link also checks that the worker ended
its lambdas by replacing itself, and served again once the link was back), and one line of
detail.
"""

from __future__ import annotations

import logging
import os
import random
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.db import DatabaseError

from demo import CRASH_EXIT_STATUS
from tests.chaos.cluster import Child, Cluster, RemoteHost, web_processes
from tests.chaos.failover import pg_failover, pooler_restart
from tests.chaos.load import Victims
from tests.chaos.records import RecordSink
from tests.chaos.services import ChaosDatabase, PrivateRedis, wait_until
from tests.chaos.sharding import ShardedStore, shard_cut, shard_failover, shard_kill
from workers import db

logger = logging.getLogger(__name__)

#: Seconds a paused gate stays paused, and a stopped Redis stays down.
PAUSE_S = 2.0
REDIS_DOWN_S = 1.0
#: Seconds between a SIGKILL and the restart of the killed process.
KILL_RESTART_S = 0.5


@dataclass(kw_only=True)
class FaultEvent:
    name: str
    started: float
    ended: float = 0.0
    ok: bool = True
    #: A crash task of the load ended the process the fault watched before the fault's own
    #: outcome could be seen (a crossing, not a failure: the run's checks of lost and
    #: overlapping executions still cover it).
    crossed: bool = False
    detail: str = ""

    def line(self) -> str:
        mark = "crossed" if self.crossed else "ok" if self.ok else "FAILED"
        return f"{self.name:16s} {mark:7s} {self.ended - self.started:5.1f}s  {self.detail}"


@dataclass(kw_only=True)
class Lab:
    """What faults act on."""

    cluster: Cluster
    redis: PrivateRedis
    database: ChaosDatabase
    records: RecordSink
    victims: Victims
    rng: random.Random
    heartbeat_interval_s: float
    pg_restart_command: str | None = None
    #: The shards' servers (None: the tasks live in the run's database).
    shards: ShardedStore | None = None
    events: list[FaultEvent] = field(default_factory=list)


def with_db(action: Callable[[], object], attempts: int = 20) -> object:
    """Run a store action from the runner, retrying while its own connection was terminated."""
    for attempt in range(1, attempts + 1):
        try:
            return action()
        except DatabaseError as exc:
            db.reset_connection()
            if attempt == attempts:
                raise
            logger.info("runner database action failed, retrying: %s", exc)
            time.sleep(0.2)
    return None


def _busy_workers(lab: Lab) -> list[Child]:
    """Workers that run a task right now (their pid appears in a processing task's worker id)."""
    from tasks_core import shards  # the CLI lists FAULTS before Django is set up
    from tasks_core.models import TaskEntity

    @shards.across(lambda answers: [worker for answer in answers for worker in answer])
    def running() -> list[str]:
        return list(TaskEntity.objects.filter(status="processing")
                    .values_list("worker", flat=True).distinct())

    ids = with_db(running)
    pids = {int(worker.split(":")[1]) for worker in ids if worker.count(":") >= 2}
    return [child for child in lab.cluster.role("worker") if child.pid in pids]


def _kill_and_restart(lab: Lab, child: Child, event: FaultEvent) -> None:
    lab.cluster.hold(child)
    code = child.kill()
    time.sleep(KILL_RESTART_S)
    lab.cluster.release(child)
    event.detail += f"{child.name} (exit {code}) restarted"


def worker_kill(lab: Lab, event: FaultEvent) -> None:
    """SIGKILL a worker process that is running tasks, and start it again."""
    busy = _busy_workers(lab)
    child = lab.rng.choice(busy or lab.cluster.role("worker"))
    event.detail = "busy " if busy else "idle "
    _kill_and_restart(lab, child, event)


def consumer_kill(lab: Lab, event: FaultEvent) -> None:
    """SIGKILL a consumer, and start it again."""
    _kill_and_restart(lab, lab.rng.choice(lab.cluster.role("consumer")), event)


def redis_flush(lab: Lab, event: FaultEvent) -> None:
    """FLUSHALL: every queued message (and any record not yet drained) is gone."""
    lab.records.drain()
    lab.redis.flushall()
    event.detail = "queues, wake-ups and undrained records flushed"


def redis_restart(lab: Lab, event: FaultEvent) -> None:
    """SIGKILL the private redis-server, leave it down a moment, start it on the same port."""
    lab.records.drain()
    lab.redis.stop()
    time.sleep(REDIS_DOWN_S)
    lab.redis.start()
    event.detail = f"down {REDIS_DOWN_S}s, back on port {lab.redis.port}"


def db_cut(lab: Lab, event: FaultEvent) -> None:
    """Cut worker 0's database connections (the proxies stop forwarding; with shards, to the
    control database and every shard) for over 3 heartbeats.

    The worker must end its lambdas (it replaces itself) within three heartbeat intervals
    (plus slack for a loaded machine), and serve again once the runner restores the proxies.
    """
    links = lab.cluster.database_links

    def cut() -> None:
        for link in links:
            link.cut()

    def restore() -> None:
        for link in links:
            link.restore()

    _cut(lab, event, lab.cluster.role("worker")[0], cut, restore)


def _remote_worker(lab: Lab, event: FaultEvent, *, on_a_host: bool
                   ) -> tuple[Child, RemoteHost] | None:
    """A remote worker (on a host of its own when `on_a_host`) picked at random; None, with
    the event failed and saying why, when the run has none."""
    remotes = [(child, remote) for child, remote in lab.cluster.remote_workers()
               if remote.host or not on_a_host]
    if remotes:
        return lab.rng.choice(remotes)
    event.ok = False
    if not lab.cluster.remote_workers():
        event.detail = "the run has no remote worker (no API token)"
    else:
        event.detail = f"no worker host of its own: {lab.cluster.no_hosts}"
    return None


def api_cut(lab: Lab, event: FaultEvent) -> None:
    """Cut a remote worker's link to the API (its proxy stops forwarding) for over 3
    heartbeats: as db-cut, it must replace itself, its tasks run again elsewhere, and it comes
    back."""
    if picked := _remote_worker(lab, event, on_a_host=False):
        child, remote = picked
        _cut(lab, event, child, remote.api.cut, remote.api.restore)


def link_down(lab: Lab, event: FaultEvent) -> None:
    """Take a remote worker's host off the network (`ip link set <veth> down`) for over 3
    heartbeats: its connections hang, to the API and to the lambdas' Redis alike. As api-cut,
    it must replace itself and come back once the link is up."""
    if picked := _remote_worker(lab, event, on_a_host=True):
        child, remote = picked
        assert remote.host is not None
        _cut(lab, event, child, remote.host.link_down, remote.host.link_up)


def _cut(lab: Lab, event: FaultEvent, child: Child, cut: Callable[[], None],
         restore: Callable[[], None]) -> None:
    """Cut `child`'s link for over three heartbeats: it must end its lambdas within three
    heartbeat intervals (plus slack for a loaded machine) by replacing itself with a fresh
    image, which serves again once the link is restored."""
    lab.cluster.hold(child)
    if not child.alive():
        child.start()
    child.wait_ready()
    before = child.replacements()
    cut()
    cut_at = time.monotonic()
    deadline = cut_at + 3 * lab.heartbeat_interval_s + 5.0
    while (child.alive() and child.replacements() == before
           and time.monotonic() < deadline):
        time.sleep(0.05)
    ended_after_s = time.monotonic() - cut_at
    replaced = child.alive() and child.replacements() > before
    # Keep it cut for longer than three heartbeats, whatever happened.
    time.sleep(max(0.0, cut_at + 4 * lab.heartbeat_interval_s - time.monotonic()))
    restore()
    if replaced:
        try:
            back = bool(wait_until(child.back_after_replacement, timeout_s=60.0,
                                   what=f"{child.name} to serve again"))
        except RuntimeError:
            back = False
        event.ok = back
        event.detail += (f"{child.name} replaced itself after {ended_after_s:.1f}s, "
                         + ("served again once restored" if back else "did NOT come back"))
    else:
        code = child.process.poll() if child.process else None
        if code == CRASH_EXIT_STATUS:
            child.start()
            _crossed(event, child, after_s=ended_after_s)
        else:
            if code is None:
                code = child.kill()
            event.ok = False
            event.detail += f"{child.name} did not replace itself (exit status {code}); "
            child.start()
    lab.cluster.release(child)


def _crossed(event: FaultEvent, child: Child, *, after_s: float) -> None:
    """The watched process of `child` was ended by a crash task of the load (demo.fail)
    before the fault's own outcome could be seen: say so, and check that the child, started
    again, serves."""
    event.crossed = True
    event.detail += (f"{child.name}'s process was ended by a crash task of the load (exit "
                     f"{CRASH_EXIT_STATUS}) {after_s:.1f}s into the fault, so the fault's own "
                     "outcome was not seen; ")
    try:
        child.wait_ready()
    except RuntimeError:
        event.ok = False
        event.detail += "it did NOT start again"
        return
    event.detail += "it served again"


def link_hang(lab: Lab, event: FaultEvent) -> None:
    """Every connection a remote worker has open to the API stops forwarding for good, without
    closing; new connections flow. Its calls must time out within the heartbeat budget and go
    again on fresh connections: it must not replace itself, and a heartbeat must get through
    after the hung calls' timeout."""
    from tasks_core.models import Worker  # the CLI lists FAULTS before Django is set up

    if not (picked := _remote_worker(lab, event, on_a_host=False)):
        return
    child, remote = picked
    lab.cluster.hold(child)
    try:
        child.wait_ready()
        replaced_before = child.replacements()
        hung, hung_at = remote.api.hang(), time.time()
        # A heartbeat that reached the API before the hang may be seen at once; a later one
        # came over a fresh connection after a hung call's timeout (one interval).
        after = datetime.fromtimestamp(hung_at + lab.heartbeat_interval_s, tz=UTC)

        def heard() -> bool:
            return bool(with_db(lambda: Worker.objects.filter(
                pid=child.pid, last_seen__gt=after).exists()))

        try:
            wait_until(heard, timeout_s=30.0, what=f"a heartbeat of {child.name}")
            took_s = time.time() - hung_at
        except RuntimeError:
            took_s = None
        replaced = child.replacements() > replaced_before
        event.ok = took_s is not None and not replaced and child.alive()
        event.detail = (f"{child.name}: {hung} connection(s) hung; "
                        + ("replaced itself" if replaced else "went on without replacing itself")
                        + (f", heard again after {took_s:.1f}s" if took_s is not None
                           else ", NOT heard again within 30s"))
    finally:
        lab.cluster.release(child)


def api_restart(lab: Lab, event: FaultEvent) -> None:
    """Restart the API under load as a rolling deploy does: one of its gunicorn processes
    (SIGTERM; the master starts another), then all of them (SIGHUP). It must answer again,
    and every remote worker that replaced itself (a restart longer than its heartbeat budget)
    must serve again."""
    api = lab.cluster.role("api")[0]
    remotes = [child for child, _remote in lab.cluster.remote_workers()]
    before = {child.name: child.replacements() for child in remotes}
    started_s = time.monotonic()
    first = web_processes(api)
    os.kill(min(first), signal.SIGTERM)
    wait_until(lambda: len(web_processes(api) - first) == 1, timeout_s=60.0,
               what="a new API process")
    wait_until(lab.cluster.api_answers, timeout_s=60.0, what="the API to answer")
    second = web_processes(api)
    os.kill(api.pid, signal.SIGHUP)
    wait_until(lambda: len(web_processes(api)) == len(second)
               and not web_processes(api) & second, timeout_s=60.0,
               what="new API processes after the reload")
    wait_until(lab.cluster.api_answers, timeout_s=60.0, what="the API to answer")
    back_s = time.monotonic() - started_s
    replaced = [child for child in remotes
                if child.replacements() > before[child.name]]
    try:
        for child in replaced:
            wait_until(child.back_after_replacement, timeout_s=60.0,
                       what=f"{child.name} to serve again")
    except RuntimeError as exc:
        event.ok = False
        event.detail = f"{exc}; "
    event.detail += (f"one API process, then all restarted in {back_s:.1f}s; "
                     f"{len(replaced)} of {len(remotes)} remote worker(s) replaced themselves")


#: The collection of the hung task of `worker-hang`: left out of the checks, as a dropped one.
HANG_COLLECTION = "hang"


def worker_hang(lab: Lab, event: FaultEvent) -> None:
    """A lambda that ignores its time limit: one demo.hang task (limit 1 s, one attempt). The
    worker that runs it must replace itself after the grace and serve again; its task ends
    `timeout` (then `dead`), in a collection the checks leave out. A crash task of the load
    that ends that worker's process first is a crossing, not a failure."""
    from tasks_core import atf

    task = with_db(lambda: atf.schedule("demo.hang", {"seconds": 3600}, timeout=1,
                                        max_attempts=1, collection=HANG_COLLECTION))
    lab.victims.dropped.append(HANG_COLLECTION)
    try:
        child, process, before = wait_until(lambda: _runner(lab, task.pk), timeout_s=60.0,
                                            what=f"a worker to run task {task.pk}")
        started = time.monotonic()
        wait_until(lambda: child.replacements() > before or process.poll() is not None,
                   timeout_s=60.0, what=f"{child.name} to replace itself")
        if child.replacements() == before and process.returncode == CRASH_EXIT_STATUS:
            event.detail = f"task {task.pk} hung; "
            _crossed(event, child, after_s=time.monotonic() - started)
            return
        back = bool(wait_until(child.back_after_replacement, timeout_s=60.0,
                               what=f"{child.name} to serve again"))
    except RuntimeError as exc:
        event.ok = False
        event.detail = f"task {task.pk}: {exc}"
        return
    event.ok = back
    event.detail = f"task {task.pk} hung; {child.name} replaced itself and served again"


def _runner(lab: Lab, task_id: int) -> tuple[Child, subprocess.Popen, int] | None:
    """The worker child running task `task_id` (its row names the worker, whose id carries
    the process's pid), that run's process and its replacements so far; None until one runs
    it."""
    from tasks_core import shards
    from tasks_core.models import TaskEntity

    @shards.by_task
    def worker_of(pk: int) -> str | None:
        return TaskEntity.objects.filter(pk=pk).values_list("worker", flat=True).first()

    worker = with_db(lambda: worker_of(task_id))
    pid = worker.split(":")[1] if isinstance(worker, str) and worker.count(":") >= 2 else None
    for child in lab.cluster.role("worker"):
        if child.process is not None and str(child.pid) == pid:
            return child, child.process, child.replacements()
    return None


def pg_restart(lab: Lab, event: FaultEvent) -> None:
    """Terminate every backend of the chaos database; a real server restart only when asked,
    or when the server is the run's own (--failover)."""
    if lab.pg_restart_command or lab.database.owns_server:
        how = lab.database.restart_server(lab.pg_restart_command)
        event.detail = f"server restarted: {how}"
        return
    ended = lab.database.terminate_backends()
    event.detail = f"pg_terminate_backend on {ended} connection(s) of {lab.database.name}"


def gate_pause(lab: Lab, event: FaultEvent) -> None:
    """Pause demo.record's gate, wait, open it again."""
    from tasks_core import scheduling

    with_db(lambda: scheduling.set_gate("demo.record", "paused"))
    time.sleep(PAUSE_S)
    with_db(lambda: scheduling.set_gate("demo.record", "open"))
    event.detail = f"demo.record paused for {PAUSE_S}s"


def collection_drop(lab: Lab, event: FaultEvent) -> None:
    """Drop the current victim collection of demo.record."""
    from tasks_core import scheduling

    name = lab.victims.advance()
    with_db(lambda: scheduling.set_gate("demo.record", "dropped", collection=name))
    event.detail = f"demo.record/{name} dropped"


FAULTS: dict[str, Callable[[Lab, FaultEvent], None]] = {
    "worker-kill": worker_kill,
    "consumer-kill": consumer_kill,
    "redis-flush": redis_flush,
    "redis-restart": redis_restart,
    "db-cut": db_cut,
    "api-cut": api_cut,
    "link-down": link_down,
    "link-hang": link_hang,
    "api-restart": api_restart,
    "pg-restart": pg_restart,
    "pg-failover": pg_failover,
    "worker-hang": worker_hang,
    "pooler-restart": pooler_restart,
    "shard-kill": shard_kill,
    "shard-failover": shard_failover,
    "shard-cut": shard_cut,
    "gate-pause": gate_pause,
    "collection-drop": collection_drop,
}


def inject(lab: Lab, name: str) -> FaultEvent:
    """Inject one fault by name; the event is also kept in `lab.events`."""
    event = FaultEvent(name=name, started=time.time())
    try:
        FAULTS[name](lab, event)
    except Exception as exc:  # noqa: BLE001 - a fault that could not be injected fails the run
        logger.exception("fault %s could not be injected", name)
        event.ok = False
        event.detail += f" error: {exc}"
    event.ended = time.time()
    lab.events.append(event)
    return event
