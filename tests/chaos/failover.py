"""The run's database on a primary and a streaming standby of its own, and the pg-failover fault.

With `--failover sync|async` the runner makes a PostgreSQL 15 primary and standby on private
ports (tests/replication.py) instead of a database on the shared server, and every process
connects with a multi-host URL (target_session_attrs=read-write). The `pg-failover` fault fences
the primary (`pg_ctl stop -m immediate`) and promotes the standby under load, checks that a task
scheduled after the promotion succeeds, then builds a new standby from the new primary
(pg_basebackup, on the fenced node's port) so that the next round can fail over again.

With `--pooler`, every process connects through a PgBouncer of the run's own instead; a
failover re-points it at the new primary (as a failover manager's hook does), and the
`pooler-restart` fault kills it and starts it again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import psycopg

from tests.chaos.services import ChaosDatabase, wait_until
from tests.replication import ReplicatedPostgres

if TYPE_CHECKING:
    from tests.chaos.faults import FaultEvent, Lab  # which imports this module

#: Seconds a task scheduled after the promotion has to succeed, or the fault counts failed.
BACK_WITHIN_S = 60.0
#: The collection of those tasks (demo.noop, outside the loader's numbered schedules).
PROBES = "failover-probe"


@dataclass(frozen=True)
class Promotion:
    """One failover: when it began (the fence) and when the new primary took writes."""

    started: float
    promoted: float


class ReplicatedChaosDatabase(ChaosDatabase):
    """The run's database on a pair of its own; `_admin` and the URL follow the primary."""

    def __init__(self, name: str, *, synchronous: bool) -> None:
        self.pair = ReplicatedPostgres(synchronous=synchronous)
        super().__init__(name, port=self.pair.primary.port)
        self.url = self.pair.url(name)

    @property
    def nodes(self) -> list[tuple[str, int]]:
        """Host and port of each node, in the URL's order (the pooler, when there is one)."""
        if self.pooler is not None:
            return super().nodes
        return [("127.0.0.1", node.port) for node in self.pair.nodes]

    def _admin(self, attempts: int = 20) -> psycopg.Connection:
        self.port = self.pair.primary.port
        return super()._admin(attempts)

    owns_server = True

    def restart_server(self, command: str | None) -> str:
        """Restart the primary (`pg_ctl restart -m fast`); the run's own, so always allowed."""
        self.pair.primary.restart()
        return f"pg_ctl restart -m fast of the primary (port {self.pair.primary.port})"

    def fail_over(self) -> Promotion:
        started = time.time()
        self.pair.failover()
        if self.pooler is not None:  # as a failover manager's hook re-points a pooler
            self.pooler.point_at("127.0.0.1", self.pair.primary.port)
        promotion = Promotion(started=started, promoted=time.time())
        self.promotions.append(promotion)
        return promotion

    def drop(self) -> None:
        self.pair.stop()

    def keep(self) -> str:
        """Stop the servers but leave their data; where it is."""
        self.pair.stop(remove=False)
        return str(self.pair.home)


def succeeds_after(what: str, *, alias: str | None = None) -> tuple[int, bool]:
    """Schedule a probe task now (on shard `alias`, if given); its id, and whether it succeeded
    within BACK_WITHIN_S."""
    from django.db import transaction

    from tasks_core import atf, shards  # the CLI lists FAULTS before Django is set up
    from tasks_core.models import TaskEntity
    from tests.chaos.faults import with_db

    def schedule() -> TaskEntity:
        if alias is None:
            return atf.schedule("demo.noop", collection=PROBES)
        with transaction.atomic(using=alias):  # placed on the shard of the caller's transaction
            return atf.schedule("demo.noop", collection=PROBES)

    @shards.by_task
    def succeeded(pk: int) -> bool:
        return TaskEntity.objects.filter(pk=pk, status="success").exists()

    probe = with_db(schedule)
    try:
        wait_until(lambda: with_db(lambda: succeeded(probe.pk)), timeout_s=BACK_WITHIN_S,
            what=f"a task scheduled after {what} to succeed")
    except RuntimeError:
        return probe.pk, False
    return probe.pk, True


def pooler_restart(lab: Lab, event: FaultEvent) -> None:
    """SIGKILL the run's PgBouncer and start it again on the same port: every process loses
    every database connection at once and must reconnect; a task scheduled after it must
    succeed within BACK_WITHIN_S."""
    pooler = lab.database.pooler
    if pooler is None:
        event.ok = False
        event.detail = "the run has no pooler (--pooler transaction|session)"
        return
    started = time.monotonic()
    pooler.restart()
    took_s = time.monotonic() - started
    probe, back = succeeds_after("the pooler's restart")
    event.ok = back
    event.detail = (f"PgBouncer ({pooler.mode}) killed and listening again in {took_s:.1f}s; "
                    f"task {probe} scheduled after it "
                    + ("succeeded" if back else f"did NOT succeed in {BACK_WITHIN_S:.0f}s"))


def pg_failover(lab: Lab, event: FaultEvent) -> None:
    """Fence the primary and promote the standby under load; a task scheduled after the
    promotion must succeed within BACK_WITHIN_S; then a new standby is built for the next
    failover."""
    database = lab.database
    if not isinstance(database, ReplicatedChaosDatabase):
        event.ok = False
        event.detail = "the run has no standby (--failover sync|async)"
        return
    fenced = database.pair.primary.port
    promotion = database.fail_over()
    probe, back = succeeds_after("the promotion")
    rebuilding = time.monotonic()
    database.pair.rebuild_standby()
    event.ok = back
    event.detail = (
        f"{'synchronous' if database.pair.synchronous else 'asynchronous'}: port {fenced} "
        f"fenced, port {database.pair.primary.port} promoted in "
        f"{promotion.promoted - promotion.started:.2f}s; "
        + (f"task {probe} scheduled after it succeeded" if back
           else f"task {probe} scheduled after it did NOT succeed in {BACK_WITHIN_S:.0f}s")
        + f"; new standby in {time.monotonic() - rebuilding:.1f}s")
