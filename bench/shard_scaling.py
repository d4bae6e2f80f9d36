"""ATF's task store sharded across several PostgreSQL clusters (issue 35): how the drain scales
with the shards, and what the survivors do when one of them dies.

Each shard is a private PostgreSQL cluster (`bench.private_postgres`) whose server runs in a
CPU quota of its own, all of the same size (`Plan.shard_cpu` cores, `bench.cpu_quota`), so that
on a small machine the shards, not the pipeline, are what binds the drain (0: no quota, for a
machine of many cores). The first shard's
database is also the control database (`DATABASE_URL`), as in a store that grew out of one
primary; ATF is pointed at the shards through `ATF_SHARD_URLS`. One shard is today's system,
configured without any shard setting.

- `shard_scaling`: for each of `Plan.shard_counts`, on fresh clusters, `drain_n` tasks are
  enqueued in bulk and drained by one consumer and one worker process per shard (the bench's
  drain fleet); then, with the same fleet warm, the lateness of paced and of delayed tasks.
  Figures: `bench.shard_figures`.
- `shard_kill`: the largest count's drain again; once a third of the other shards' tasks are
  done, the last shard's server is stopped as if its machine died (`pg_ctl stop -m immediate`).
  The survivors' rate before and after the kill, and their ratio: a dead shard should cost
  only its own tasks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg

from bench import services, shard_figures
from bench.cpu_quota import CpuQuota
from bench.drivers.base import Env
from bench.measure import Plan, Target, lateness
from bench.measure_growth import scaled_fleet
from bench.private_postgres import postmaster_pid, private_cluster, set_up, stop
from bench.procs import Fleet, run_once
from bench.producer import CHUNK
from bench.shard_figures import BASELINE_SHARDS, key, slot_key
from bench.stats import drain_rate

#: Consumers of every drain: one, which takes every shard.
CONSUMERS = 1
#: The share of the surviving shards' tasks done when `shard_kill` stops the last shard.
KILL_AT = 1 / 3
#: How often a wait reads the finished tasks' records.
POLL_S = 0.2
#: The control database's alias, migrated by the driver's own set-up.
CONTROL_ALIAS = "default"


class ShardsUnsupported(RuntimeError):
    """The code under test does not make shards of `ATF_SHARD_URLS`."""


@dataclasses.dataclass(frozen=True)
class Cluster:
    """One shard: its slot, its database, its server's data directory and its CPU quota."""

    slot: int
    dsn: str
    data: Path
    #: None: the server runs unlimited (`Plan.shard_cpu` 0, for a machine of many cores).
    quota: CpuQuota | None

    @property
    def port(self) -> int:
        return services.port_of(self.dsn)


def shard_aliases(target: Target, env: Env) -> list[str]:
    """The shards' aliases as ATF's settings make them of `env.shard_dsns`; ShardsUnsupported
    where the code under test makes none (or another number)."""
    answer = run_once(target.driver.shards_command(env)).strip().splitlines()[-1]
    aliases = json.loads(answer)["shards"]
    wanted = len(env.shard_dsns)
    if not aliases or len(aliases) != wanted:
        raise ShardsUnsupported(
            f"the code under test has no shard support: ATF_SHARD_URLS with {wanted} URLs "
            f"gave ATF_STORE_SHARDS = {aliases!r}")
    return aliases


def require_support(target: Target, shards: int) -> None:
    """ShardsUnsupported unless ATF's settings make `shards` shards of as many URLs (read from
    the settings alone: the databases need not exist)."""
    server = target.env.pg_dsn.rsplit("/", 1)[0]
    dsns = (target.env.pg_dsn, *(f"{server}/shard_probe{slot}" for slot in range(1, shards)))
    shard_aliases(target, dataclasses.replace(target.env, shard_dsns=dsns))


@contextlib.contextmanager
def sharded_target(target: Target, plan: Plan,
                   shards: int) -> Iterator[tuple[Target, list[Cluster]]]:
    """A copy of `target` whose store is `shards` new private clusters, migrated, then each held
    to a CPU quota of `plan.shard_cpu` cores (none where it is 0); and those clusters by slot.
    Everything is stopped and removed afterwards."""
    with contextlib.ExitStack() as stack:
        clusters = []
        for slot in range(shards):
            quota = (stack.enter_context(CpuQuota(f"atf-bench-{os.getpid()}-shard{slot}",
                                                  plan.shard_cpu)) if plan.shard_cpu else None)
            server, data = stack.enter_context(private_cluster(quota))
            dsn = services.ensure_database(server, f"shards_{target.name}")
            clusters.append(Cluster(slot=slot, dsn=dsn, data=data, quota=quota))
        dsns = tuple(cluster.dsn for cluster in clusters)
        env = dataclasses.replace(target.env, pg_dsn=dsns[0],
                                  shard_dsns=dsns if shards > 1 else ())
        here = stack.enter_context(set_up(target, env))
        if shards > 1:
            for alias in shard_aliases(target, env):
                if alias != CONTROL_ALIAS:
                    run_once(target.driver.shard_setup_command(env, alias))
        for cluster in clusters:  # set up at full speed; measured in the quotas
            if cluster.quota is not None:
                _hold(cluster, cluster.quota)
        yield here, clusters


def _hold(cluster: Cluster, quota: CpuQuota) -> None:
    """Start the cluster's quota; RuntimeError unless its server runs inside it (a backend
    forked now is checked too)."""
    quota.limit()
    with psycopg.connect(cluster.dsn, autocommit=True) as conn:
        backend = int(conn.execute("SELECT pg_backend_pid()").fetchone()[0])
        inside = set(quota.pids())
    if not {postmaster_pid(cluster.data), backend} <= inside:
        raise RuntimeError(f"shard {cluster.slot}'s server is not in its CPU quota "
                           f"{quota.path}")


def _throttled_s(cluster: Cluster) -> float:
    """Seconds the cluster's quota has held it back so far (0 without a quota)."""
    return cluster.quota.throttled_s() if cluster.quota is not None else 0.0


def _scalar(dsn: str, query: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return int(conn.execute(query).fetchone()[0])


def _wal_bytes(cluster: Cluster) -> int:
    """The cluster's WAL position, in bytes."""
    return _scalar(cluster.dsn, "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")


def _homes(target: Target, clusters: list[Cluster]) -> dict[int, int]:
    """The slot of every task in the store, by id: the cluster its row is found on."""
    table = target.driver.SCHEMA[0]
    homes: dict[int, int] = {}
    for cluster in clusters:
        with psycopg.connect(cluster.dsn, autocommit=True) as conn:
            homes.update((task_id, cluster.slot)
                         for (task_id,) in conn.execute(f"SELECT id FROM {table}"))  # noqa: S608
    return homes


def _backlog(target: Target, plan: Plan, clusters: list[Cluster]) -> dict[int, int]:
    """`plan.drain_n` tasks enqueued in bulk on an empty store; their slots by id.

    ATF puts each batch of unkeyed tasks on one shard, the shards in turn: the backlog goes
    in a whole number of rounds of equal batches, so that each shard gets its share."""
    services.flush(target.env.redis_url)
    rounds = math.ceil(plan.drain_n / (len(clusters) * CHUNK))
    target.produce(task="record", key="drain", n=plan.drain_n, mode="bulk",
                   chunk=math.ceil(plan.drain_n / (len(clusters) * rounds)))
    return _homes(target, clusters)


def _fleet(target: Target, clusters: list[Cluster]) -> Fleet:
    """One consumer and a worker process per shard; their CPU sampled, and that of Redis and
    of each cluster (role `postgres<slot>`)."""
    fleet = scaled_fleet(target, len(clusters), CONSUMERS)
    fleet.watch("redis", services.redis_pid(target.env.redis_url))
    for cluster in clusters:
        fleet.watch(f"postgres{cluster.slot}", postmaster_pid(cluster.data))
    return fleet


def _by_slot(target: Target, homes: dict[int, int]) -> dict[int, list[shard_figures.Row]]:
    """The drain's records by the slot of their task."""
    found: dict[int, list[shard_figures.Row]] = {}
    for task_id, due, start, end in target.driver.task_records(target.redis, "drain"):
        found.setdefault(homes[task_id], []).append((due, start, end))
    return found


def _drain(target: Target, plan: Plan, clusters: list[Cluster]) -> dict[str, float]:
    """One drain over `clusters` and the lateness after it: the figures of `len(clusters)`."""
    count = len(clusters)
    homes = _backlog(target, plan, clusters)
    wal_before = [_wal_bytes(cluster) for cluster in clusters]
    throttled_before = [_throttled_s(cluster) for cluster in clusters]
    with _fleet(target, clusters) as fleet:
        target.wait_records("drain", plan.drain_n, timeout_s=plan.drain_timeout_s, fleet=fleet)
        wal = [_wal_bytes(cluster) - before for cluster, before in zip(clusters, wal_before,
                                                                        strict=True)]
        throttled = [_throttled_s(cluster) - before
                     for cluster, before in zip(clusters, throttled_before, strict=True)]
        connections = [sum(fleet.connections_to(cluster.port).values()) for cluster in clusters]
        late = lateness(target, plan, fleet)
    slots = _by_slot(target, homes)
    rows = [row for part in slots.values() for row in part]
    first_start = min(start for _due, start, _end in rows)
    last_end = max(end for _due, _start, end in rows)
    cpu = fleet.cpu_between(first_start, last_end)
    figures = {shard_figures.rate_key(count): drain_rate(rows),
               key(count, "pipeline_cpu_us"): sum(cpu.get(role, 0.0) for role in
                                                  shard_figures.PIPELINE_ROLES) * 1e6 / len(rows),
               **{key(count, name): value for name, value in late.items()}}
    rates = []
    for cluster in clusters:
        part = slots.get(cluster.slot, [])
        rates.append(drain_rate(part))
        per_task = 1 / len(part)
        figures.update({
            slot_key(count, cluster.slot, "rate"): rates[-1],
            slot_key(count, cluster.slot, "tasks"): float(len(part)),
            slot_key(count, cluster.slot, "pg_cpu_us"):
                cpu.get(f"postgres{cluster.slot}", 0.0) * 1e6 * per_task,
            slot_key(count, cluster.slot, "wal_bytes"): wal[cluster.slot] * per_task,
            slot_key(count, cluster.slot, "conns"): float(connections[cluster.slot]),
            slot_key(count, cluster.slot, "throttled"):
                throttled[cluster.slot] / (last_end - first_start)})
    figures[key(count, "skew")] = shard_figures.skew(rates)
    return figures


def shard_scaling(target: Target, plan: Plan) -> dict[str, float]:
    """The drain with each of `plan.shard_counts` shards, each a cluster in a CPU quota (ATF)."""
    if target.name != "atf":
        return {}
    drains = {count: _drained(target, plan, count) for count in plan.shard_counts}
    if BASELINE_SHARDS in drains and len(drains) > 1:  # and last: shard_figures.baseline_twice
        drains[BASELINE_SHARDS] = shard_figures.baseline_twice(
            drains[BASELINE_SHARDS], _drained(target, plan, BASELINE_SHARDS))
    figures = {name: value for drain in drains.values() for name, value in drain.items()}
    return shard_figures.with_comparisons(figures, plan.shard_counts)


def _drained(target: Target, plan: Plan, count: int) -> dict[str, float]:
    """The figures of one drain with `count` shards, on fresh clusters."""
    with sharded_target(target, plan, count) as (here, clusters):
        return _drain(here, plan, clusters)


def _wait_finished(target: Target, fleet: Fleet, done: Callable[[set[int]], bool], *,
                   timeout_s: float) -> bool:
    """Until `done(ids of the drain's finished tasks)`, or the timeout; whether it came."""
    deadline = time.monotonic() + timeout_s
    while not done({row[0] for row in target.driver.task_records(target.redis, "drain")}):
        fleet.check_alive()
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL_S)
    return True


def shard_kill(target: Target, plan: Plan) -> dict[str, float]:
    """The survivors' rate before and after one of the largest count's shards dies (ATF)."""
    if target.name != "atf":
        return {}
    count = max(plan.shard_counts)
    if count < 2:
        target.notes.append("atf: shard_kill needs --shards with a count above 1")
        return {}
    with sharded_target(target, plan, count) as (here, clusters):
        homes = _backlog(here, plan, clusters)
        victim = clusters[-1]
        survivors = {task_id for task_id, slot in homes.items() if slot != victim.slot}
        with _fleet(here, clusters) as fleet:
            _wait_finished(here, fleet,
                           lambda ids: len(ids & survivors) >= KILL_AT * len(survivors),
                           timeout_s=plan.drain_timeout_s)
            killed_at = time.time()
            stop(victim.data, mode="immediate")
            if not _wait_finished(here, fleet, survivors.issubset,
                                  timeout_s=plan.drain_timeout_s):
                here.notes.append(f"atf: with shard {victim.slot} stopped, not every task of "
                                  f"the other shards finished within {plan.drain_timeout_s:.0f} s")
        rows = [row for slot, part in _by_slot(here, homes).items() if slot != victim.slot
                for row in part]
    if max(end for _due, _start, end in rows) <= killed_at:
        target.notes.append("atf: shard_kill: the other shards' tasks had all finished before "
                            "the kill (a larger --tasks, or a smaller --shard-cpu)")
        return {}
    return {shard_figures.KILL_SHARDS: float(count), **shard_figures.kill_rates(rows, killed_at)}
