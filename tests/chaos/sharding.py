"""The run's task store sharded across primaries of its own, and the shard faults.

With `--shards N` the tasks live in N shards (tasks_core.shards), each a PostgreSQL 15 primary
with a synchronous standby of the run's own on private ports (tests/replication.py), named to
every process in ATF_SHARD_URLS by a multi-host URL (target_session_attrs=read-write), so that
each process finds a shard's new primary by itself after a failover. The control data stays in
the run's database. Worker 0 reaches each shard through proxies of its own (one per node), so
that its link to one shard alone can be cut.

- `shard-kill`: one shard's servers, primary and standby, stop at once (`pg_ctl stop -m
  immediate`) and start again SHARD_DOWN_S later.
- `shard-failover`: one shard's primary is fenced and its standby promoted; a new standby is
  built from it afterwards, so that the next round can fail over again.
- `shard-cut`: worker 0's link to one shard resets (its proxies close every connection and
  each new one) for longer than three heartbeat intervals; its links to the others stay up.

Each must cost only that shard's tasks, and for a while: a task scheduled on that shard after
the fault succeeds within BACK_WITHIN_S (checked); worker 0, cut from one shard, goes on
serving the others without replacing itself (checked). The run's own checks (lost,
overlapping, vanished) cover every shard.
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING

from tests.chaos.failover import BACK_WITHIN_S, succeeds_after
from tests.chaos.services import wait_until
from tests.replication import ReplicatedPostgres
from tests.shard_clusters import copy_schema

if TYPE_CHECKING:
    from tests.chaos.cluster import Child
    from tests.chaos.faults import FaultEvent, Lab  # which imports this module

#: Seconds a killed shard stays down.
SHARD_DOWN_S = 2.0
#: The worker whose link to one shard `shard-cut` cuts (the one behind proxies).
CUT_WORKER = 0
#: Seconds `shard-cut` waits for that worker to run a task of the shard before it cuts.
HOLD_WAIT_S = 10.0


class ShardedStore:
    """`count` shards, each a primary and a synchronous standby of its own, by slot."""

    def __init__(self, count: int) -> None:
        self.pairs: list[ReplicatedPostgres] = []
        try:
            for _slot in range(count):
                self.pairs.append(ReplicatedPostgres(synchronous=True))
        except BaseException:
            self.stop()
            raise

    def urls(self, dbname: str) -> list[str]:
        """Each shard's multi-host URL, by slot (ATF_SHARD_URLS, joined by commas)."""
        return [pair.url(dbname) for pair in self.pairs]

    @property
    def nodes(self) -> list[list[tuple[str, int]]]:
        """Each shard's nodes (host, port), in its URL's order: what a proxy stands in front of."""
        return [[("127.0.0.1", node.port) for node in pair.nodes] for pair in self.pairs]

    def create(self, dbname: str, *, host: str, port: int, source: str) -> None:
        """Database `dbname` on every shard, with the tables (no rows) of the migrated control
        database `source` at host:port (tasks_core.shards.prepare does the rest)."""
        copy_schema([pair.primary for pair in self.pairs], dbname, host=host, port=port,
                    source=source)

    def stop(self, *, remove: bool = True) -> None:
        for pair in self.pairs:
            pair.stop(remove=remove)

    def keep(self) -> str:
        """Stop the servers but leave their data; where it is."""
        self.stop(remove=False)
        return ", ".join(str(pair.home) for pair in self.pairs)


def _victim(lab: Lab, event: FaultEvent) -> tuple[int, str, ReplicatedPostgres] | None:
    """A shard picked at random: its slot, alias and servers; None, with the event failed and
    saying why, when the run has no shards."""
    from tasks_core import shards  # the CLI lists FAULTS before Django is set up

    if lab.shards is None:
        event.ok = False
        event.detail = "the run has no shards (--shards N)"
        return None
    slot = lab.rng.randrange(len(lab.shards.pairs))
    return slot, shards.aliases()[slot], lab.shards.pairs[slot]


def _serves_again(event: FaultEvent, alias: str, what: str) -> None:
    """A task scheduled on `alias` now must succeed within BACK_WITHIN_S."""
    probe, back = succeeds_after(what, alias=alias)
    event.ok = event.ok and back
    event.detail += (f"; task {probe} scheduled on it after {what} "
                     + ("succeeded" if back else f"did NOT succeed in {BACK_WITHIN_S:.0f}s"))


def shard_kill(lab: Lab, event: FaultEvent) -> None:
    """Stop one shard's primary and standby at once, start them again SHARD_DOWN_S later."""
    if not (picked := _victim(lab, event)):
        return
    _slot, alias, pair = picked
    for node in (pair.primary, pair.standby):
        node.fence()
    time.sleep(SHARD_DOWN_S)
    started = time.monotonic()
    for node in (pair.primary, pair.standby):  # its synchronous commits wait for the standby
        node.start()
    event.detail = (f"{alias} (port {pair.primary.port}) down {SHARD_DOWN_S:.0f}s, "
                    f"started again in {time.monotonic() - started:.1f}s")
    _serves_again(event, alias, "its return")


def shard_failover(lab: Lab, event: FaultEvent) -> None:
    """Fence one shard's primary and promote its standby under load; then a new standby."""
    if not (picked := _victim(lab, event)):
        return
    _slot, alias, pair = picked
    fenced = pair.primary.port
    failover = pair.failover()
    event.detail = (f"{alias}: port {fenced} fenced, port {pair.primary.port} promoted in "
                    f"{failover.total_s:.2f}s")
    _serves_again(event, alias, "the promotion")
    rebuilding = time.monotonic()
    pair.rebuild_standby()
    event.detail += f"; new standby in {time.monotonic() - rebuilding:.1f}s"


def shard_cut(lab: Lab, event: FaultEvent) -> None:
    """Reset worker 0's link to one shard for longer than three heartbeat intervals: it must
    stop that shard's tasks and go on with the others' without replacing itself, and the
    shard must serve again once the link is back."""
    from demo import CRASH_EXIT_STATUS
    from tests.chaos.faults import _crossed

    if not (picked := _victim(lab, event)):
        return
    slot, alias, _pair = picked
    child = lab.cluster.role("worker")[CUT_WORKER]
    link = lab.cluster.shard_proxies[slot]
    lab.cluster.hold(child)
    try:
        child.wait_ready()
        # The cut bites hardest while the worker runs one of that shard's tasks: wait a while
        # for one (the load's tasks are short, so it may have ended when the budget runs out).
        held = _holds(child, alias)
        replaced_before = child.replacements()
        log_before = child.log_text()
        cut_at = time.monotonic()
        dropped = link.drop()
        time.sleep(4 * lab.heartbeat_interval_s)
        link.restore()
        cut_s = time.monotonic() - cut_at
        if not child.alive() and child.process is not None \
                and child.process.returncode == CRASH_EXIT_STATUS:
            event.detail = f"{alias}: "
            child.start()
            _crossed(event, child, after_s=cut_s)
            return
        replaced = child.replacements() > replaced_before
        log = child.log_text()[len(log_before):]
        event.ok = child.alive() and not replaced
        event.detail = (
            f"{child.name} ({'running a task of it' if held else 'running none of its tasks'}"
            f"): its link to {alias} reset for {cut_s:.1f}s ({dropped} connection(s) closed); "
            f"its heartbeat missed the shard {log.count(f'reach shard slot(s) {slot}')} "
            f"time(s), it stopped the shard's tasks {log.count(f'shard slot {slot} unreachable')}"
            " time(s) and "
            + ("replaced itself (its other shards' tasks with it)" if replaced
               else "went on with the others without replacing itself" if child.alive()
               else "its process ENDED"))
    finally:
        lab.cluster.release(child)
    _serves_again(event, alias, "the cut")


def _holds(child: Child, alias: str, wait_s: float = HOLD_WAIT_S) -> bool:
    """Whether the worker `child` runs a task of shard `alias`, waiting up to `wait_s` for
    it to (a worker's id carries its pid: host:pid:...)."""
    from tasks_core import shards
    from tasks_core.models import TaskEntity
    from tests.chaos.faults import with_db

    def running() -> bool:
        with shards.using(alias):
            return TaskEntity.objects.filter(status="processing",
                                             worker__contains=f":{child.pid}:").exists()

    with contextlib.suppress(RuntimeError):
        return bool(wait_until(lambda: with_db(running), timeout_s=wait_s,
                               what=f"{child.name} to run a task of {alias}"))
    return False
