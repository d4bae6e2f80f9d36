"""`python -m tests.chaos short|long|soak [options]`: set up, run, tear down.

The runner makes its own PostgreSQL database (dropped and recreated; its name must contain
"chaos"), starts its own redis-server on a free port, migrates, starts the API (gunicorn), the
consumers and the worker processes with short timeouts, and then runs the chosen mode. With
`--shards N` the tasks live in N shards of the run's own (tests/chaos/sharding.py).
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import random
import sys
import tempfile
from pathlib import Path

from tests.chaos.failover import ReplicatedChaosDatabase
from tests.chaos.faults import FAULTS
from tests.chaos.services import ChaosDatabase, PrivateRedis, say
from tests.chaos.sharding import ShardedStore
from tests.pooler import MODES as POOL_MODES
from tests.pooler import PgBouncer
from tests.ports import free_port

#: Timeouts of every process of the run: short, so that recovery takes seconds, not minutes.
#: The heartbeat timeout exceeds three heartbeat intervals, as the workers check at start.
CHILD_SETTINGS = {
    "ATF_DEMO": "1",
    "ATF_HEARTBEAT_INTERVAL_S": "0.5",
    "ATF_HEARTBEAT_TIMEOUT_S": "2.5",
    "ATF_ENQUEUE_TIMEOUT_S": "3",
    "ATF_CLAIM_TIMEOUT_S": "3",
    "ATF_POLL_INTERVAL_S": "0.2",
    "ATF_RESTART_DELAY_S": "0.3",
    "ATF_BACKOFF_BASE_S": "0.2",
    "ATF_BACKOFF_CAP_S": "2",
    "ATF_SHUTDOWN_GRACE_S": "5",
    "ATF_RETENTION_S": "0",
    "ATF_API_THROTTLE_RATE": "",
    "ATF_QUEUE_BACKEND": "redis",
    "ATF_REDIS_CLUSTER": "0",
    "ATF_QUEUE_PREFIX": "chaos",
    "ATF_LOG_LEVEL": "INFO",
    "DJANGO_SETTINGS_MODULE": "atf_project.settings",
    "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
    "PYTHONUNBUFFERED": "1",
}

#: Server connections of the run's PgBouncer, by pool mode: in transaction mode the processes'
#: transactions share them; in session mode each client connection holds one for its life, so
#: the pool must cover every connection of the run (about 80 with the default processes).
CHAOS_POOL_SIZES = {"transaction": 30, "session": 120}

#: Defaults that differ by mode: tasks, rate (tasks/s), fault interval (s), task seconds,
#: settle timeout (s).
MODE_DEFAULTS = {
    "short": {"tasks": 2000, "rate": 50.0, "fault_interval": 2.5, "task_seconds": 0.1,
              "settle_timeout": 90.0},
    "long": {"tasks": 100_000, "rate": 250.0, "fault_interval": 4.0, "task_seconds": 0.03,
             "settle_timeout": 900.0},
    "soak": {"tasks": 0, "rate": 40.0, "fault_interval": 0.0, "task_seconds": 0.05,
             "settle_timeout": 120.0},
}


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tests.chaos",
        description="Chaos and soak runs of ATF on real PostgreSQL, Redis and processes.",
    )
    parser.add_argument("mode", choices=sorted(MODE_DEFAULTS),
                        help="short: ~2,000 tasks, every fault once; long: 100,000 tasks, "
                             "faults every few seconds; soak: a steady stream for --duration")
    parser.add_argument("--tasks", type=int, help="tasks to schedule (chaos modes)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the task mix and faults")
    parser.add_argument("--rate", type=float, help="tasks scheduled per second")
    parser.add_argument("--duration", type=float, default=300.0,
                        help="seconds of steady load (soak; default %(default)s)")
    parser.add_argument("--fault-interval", type=float,
                        help="mean seconds between faults (soak: 0 = no faults)")
    parser.add_argument("--faults", default=None,
                        help="comma-separated faults to inject (default: all of them; "
                             "pg-failover only with --failover, pooler-restart only with "
                             "--pooler, shard-* only with --shards)")
    parser.add_argument("--failover", choices=("sync", "async", "off"), default=None,
                        help="run on a PostgreSQL 15 primary and a streaming standby of the "
                             "run's own, with synchronous or asynchronous replication, and "
                             "inject pg-failover (default: sync in long mode, off otherwise)")
    parser.add_argument("--pooler", choices=("off", *POOL_MODES), default=None,
                        help="put a PgBouncer of the run's own, in this pool mode, between "
                             "every process and PostgreSQL (re-pointed at the new primary after "
                             "a failover), and inject pooler-restart (default: transaction in "
                             "long mode, off otherwise)")
    parser.add_argument("--shards", type=int, default=0,
                        help="keep the tasks in this many shards (2 or more), each a PostgreSQL "
                             "15 primary with a synchronous standby of the run's own, the "
                             "control data in the run's database, and inject shard-kill, "
                             "shard-failover and shard-cut (default: no shards)")
    parser.add_argument("--task-seconds", type=float,
                        help="most demo.record tasks sleep up to this; a tenth up to 6x")
    parser.add_argument("--settle-timeout", type=float,
                        help="seconds to wait for every task to finish after the load")
    parser.add_argument("--workers", type=int, default=4, help="worker processes (default 4)")
    parser.add_argument("--threads", type=int, default=8, help="executor threads per worker")
    parser.add_argument("--consumers", type=int, default=2, help="consumers (default 2)")
    parser.add_argument("--remote-workers", type=int, default=2,
                        help="remote worker processes (runworker --api), each on a worker host "
                             "of its own: a network namespace (default 2)")
    parser.add_argument("--batch", type=int,
                        help="tasks per schedule call (default 100; soak: a fifth of the rate)")
    parser.add_argument("--max-backlog", type=int,
                        help="pause scheduling while more tasks than this are unfinished "
                             "(default 300; soak: no limit, a backlog shows as latency drift)")
    parser.add_argument("--api-share", type=float, default=0.25,
                        help="share of batches scheduled through the REST API when it answers")
    parser.add_argument("--database", default="atf_chaos",
                        help="database to (re)create; its name must contain 'chaos'")
    parser.add_argument("--pg-host", default="127.0.0.1")
    parser.add_argument("--pg-port", type=int, default=5432)
    parser.add_argument("--pg-user", default="postgres")
    parser.add_argument("--pg-restart-command", default=None,
                        help="command that restarts the PostgreSQL server (e.g. 'pg_ctlcluster "
                             "15 main restart'); without it pg-restart terminates the chaos "
                             "database's backends instead. Never on a shared server.")
    parser.add_argument("--redis-port", type=int, default=0,
                        help="port of the private redis-server (default: a free one)")
    parser.add_argument("--log-dir", type=Path, default=None,
                        help="where the processes' logs go (default: a new temp directory)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="override a setting of every process, e.g. "
                             "--set ATF_ENQUEUE_TIMEOUT_S=10 (repeatable)")
    parser.add_argument("--keep-database", action="store_true",
                        help="keep the database after a successful run (kept after a failure)")
    args = parser.parse_args(argv)
    for name, value in MODE_DEFAULTS[args.mode].items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    try:
        args.set = dict(item.split("=", 1) for item in args.set)
    except ValueError:
        parser.error("--set takes NAME=VALUE")
    if args.max_backlog is None:
        args.max_backlog = 10**9 if args.mode == "soak" else 300
    if args.batch is None:
        args.batch = max(1, int(args.rate // 5)) if args.mode == "soak" else 100
    if args.failover is None:
        args.failover = "sync" if args.mode == "long" else "off"
    if args.pooler is None:
        args.pooler = "transaction" if args.mode == "long" else "off"
    if args.shards == 1 or args.shards < 0:
        parser.error("--shards takes 2 or more (0: no shards)")
    if args.faults is None:
        args.faults = ",".join(name for name in FAULTS
                               if (name != "pg-failover" or args.failover != "off")
                               and (name != "pooler-restart" or args.pooler != "off")
                               and (not name.startswith("shard-") or args.shards))
    args.faults = [name.strip() for name in args.faults.split(",") if name.strip()]
    if unknown := sorted(set(args.faults) - set(FAULTS)):
        parser.error(f"unknown fault(s) {', '.join(unknown)}; known: {', '.join(FAULTS)}")
    if "pg-failover" in args.faults and args.failover == "off":
        parser.error("pg-failover needs a standby: add --failover sync or --failover async")
    if "pooler-restart" in args.faults and args.pooler == "off":
        parser.error("pooler-restart needs a pooler: add --pooler transaction or session")
    if not args.shards and (sharded := [name for name in args.faults
                                        if name.startswith("shard-")]):
        parser.error(f"{', '.join(sharded)} {'needs' if len(sharded) == 1 else 'need'} "
                     "shards: add --shards 3")
    args.crash_every = max(1, args.tasks // max(3, args.tasks // 1000)) if args.tasks else 10**9
    return args


def api_token(*options: str, user: str = "chaos", team: str = "demo") -> str | None:
    """A token of `team` (`--worker`: a worker token) made by `atf_token` in this process
    (whose settings are the run's: a child process would cost a Django start-up), or None when
    the command refuses."""
    from django.core.management import CommandError, call_command

    out = io.StringIO()
    try:
        call_command("atf_token", team, user, *options, stdout=out, stderr=io.StringIO())
    except CommandError:
        return None
    lines = out.getvalue().strip().splitlines()
    return lines[-1].strip() if lines else None


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")

    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="atf-chaos-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    if args.failover == "off":
        database = ChaosDatabase(args.database, host=args.pg_host, port=args.pg_port,
                                 user=args.pg_user)
    else:
        database = ReplicatedChaosDatabase(args.database, synchronous=args.failover == "sync")
    server = PrivateRedis(args.redis_port or free_port(), log_dir)
    pooler = None
    store: ShardedStore | None = None
    status = 1
    try:
        database.recreate()
        if args.shards:
            store = ShardedStore(args.shards)
        server.start()
        if args.pooler != "off":
            pooler = PgBouncer(args.pooler, host=database.host, port=database.port,
                               pool_size=CHAOS_POOL_SIZES[args.pooler])
            database.pool(pooler)
        env = {**os.environ, **CHILD_SETTINGS, **args.set, "DATABASE_URL": database.url,
               "REDIS_URL": server.url}
        if store is not None:
            env["ATF_SHARD_URLS"] = ",".join(store.urls(database.name))
        # The runner itself is a Django process too, but quieter than its children.
        os.environ.update({**env, "ATF_LOG_LEVEL": "WARNING"})
        say(f"chaos {args.mode}: database {database.url} (failover: {args.failover}, pooler: "
            f"{args.pooler}), redis port {server.port}, logs in {log_dir}"
            + (f", {args.shards} shards" if store else ""))
        status = _run(args, env, database, server, log_dir, store)
    finally:
        server.stop()
        if pooler is not None:
            pooler.stop()
        if status == 0 and not args.keep_database:
            database.drop()
            if store is not None:
                store.stop()
        else:
            say(f"database {database.name} kept for inspection ({database.keep()})")
            if store is not None:
                say(f"shards kept for inspection ({store.keep()})")
    return status


def _run(args: argparse.Namespace, env: dict[str, str], database: ChaosDatabase,
         server: PrivateRedis, log_dir: Path, store: ShardedStore | None) -> int:
    import django

    django.setup()
    from django.core.management import call_command

    from tests.chaos import soak
    from tests.chaos.cluster import Cluster
    from tests.chaos.faults import Lab
    from tests.chaos.load import ApiClient, Victims
    from tests.chaos.records import RecordSink
    from tests.chaos.run import run_chaos

    if store is None:
        call_command("migrate", verbosity=0)
    else:
        _prepare_shards(store, database)
    token = api_token()
    cluster = Cluster(env=env, database_nodes=database.nodes,
                      shard_nodes=store.nodes if store else (),
                      workers=args.workers, consumers=args.consumers, threads=args.threads,
                      log_dir=log_dir, remote_workers=args.remote_workers, web_processes=2,
                      worker_token=api_token("--worker", user="chaos-worker"))
    try:
        cluster.start()
        api = ApiClient(cluster.api_url, token) if token else None
        if api is not None and not api.answers():
            api = None
        remotes = len(cluster.remote_workers())
        where = (f"on loopback ({cluster.no_hosts})" if cluster.no_hosts
                 else "each on a host of its own")
        remote = f"{remotes} remote worker(s) {where} and " if remotes else ""
        say(f"started API, {args.consumers} consumer(s), {remote}{args.workers} worker(s) x "
            f"{args.threads} thread(s); scheduling through the API: {'yes' if api else 'no'}")
        lab = Lab(cluster=cluster, redis=server, database=database, records=RecordSink(server),
                  victims=Victims(), rng=random.Random(args.seed + 2),
                  heartbeat_interval_s=float(env["ATF_HEARTBEAT_INTERVAL_S"]),
                  pg_restart_command=args.pg_restart_command, shards=store)
        if args.mode == "soak":
            return soak.run_soak(args, lab, api)
        return run_chaos(args, lab, api)
    finally:
        cluster.stop()


def _prepare_shards(store: ShardedStore, database: ChaosDatabase) -> None:
    """The control database migrated as a store of one database (its data migrations read
    and write task rows, which the shards do not hold yet); then each shard's tables (the
    control database's schema), its id sequences at its slot and its copies of the control rows
    (what `migrate --database shardN` does, in a second rather than ten)."""
    from django.core.management import call_command
    from django.test.utils import override_settings

    from tasks_core import shards

    with override_settings(ATF_STORE_SHARDS=None):
        call_command("migrate", verbosity=0)
    store.create(database.name, host=database.host, port=database.port, source=database.name)
    for alias in shards.others():
        shards.prepare(alias)
