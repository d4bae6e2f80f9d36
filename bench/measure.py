"""The measurements. Each takes one system, runs once, and returns {metric: value}."""

from __future__ import annotations

import itertools
import json
import logging
import os
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from types import ModuleType

import redis

from bench import services, stats, store_cost
from bench.drivers.base import ATF_PYTHON, PEERS_PYTHON, ROOT, Env
from bench.procs import Fleet, run_once
from bench.stats import drain_rate

logger = logging.getLogger(__name__)

MB = 1024 * 1024
#: Tasks sent and awaited before a latency run, so that start-up is not measured.
WARMUP_TASKS = 4


@dataclass(frozen=True, kw_only=True)
class Plan:
    """Sizes of one run (`--quick` picks the small one)."""

    repeats: int
    enqueue_n: int
    rest_single_n: int
    rest_batch_n: int
    drain_n: int
    drain_timeout_s: float
    immediate_n: int
    immediate_rate: float
    delayed_n: int
    delay_min_s: float
    delay_max_s: float
    backlog_n: int
    b_rate: float
    b_seconds: float
    #: Longest wait for a warm-up or for lambda B's tasks (a starved B ends there).
    wait_s: float
    #: Idle worker processes whose PostgreSQL connections are counted, direct and remote.
    connection_workers: int = 32
    #: A wait ends early when no task at all started within this many seconds of its start.
    none_started_s: float = 30.0
    #: `schedule()` calls made inside one open transaction of the caller's.
    in_transaction_n: int = 5_000
    #: The backlog ramp: tasks released at once, and how long the drain is watched after.
    ramp_n: int = 100_000
    ramp_observe_s: float = 12.0
    #: The scale curve: worker processes and consumers (ATF).
    scale_workers: tuple[int, ...] = (1, 2, 4)
    scale_consumers: tuple[int, ...] = (1, 2)
    #: Finished tasks in the table for the store-size figures (ATF), and what is timed there.
    store_sizes: tuple[int, ...] = (1_000_000, 10_000_000)
    store_schedule_n: int = 2_000
    pass_rounds: int = 10
    pass_due: int = 500
    #: Rounds of the three reads (`/metrics`, `GET /lambdas/`, the dashboard) at each size.
    read_rounds: int = 20
    #: Retention rounds timed at each size above 0 (each prunes the oldest finished tasks).
    prune_rounds: int = 5
    #: The backlog at the end of the store size: tasks delayed (due in a day), tasks due.
    backlog_delayed: int = 10_000_000
    backlog_due: int = 1_000_000
    #: The queue's length against its backlog: passes for this long, nobody claiming, with
    #: this enqueue timeout (so that it fires for the first passes' tasks more than once).
    queue_seconds: float = 20.0
    queue_enqueue_timeout_s: float = 3.0
    #: Retention's pace (on request): tasks a second scheduled for this long, pruned past
    #: this retention, while the drain runs.
    pace_rate: float = 600.0
    pace_seconds: float = 1_800.0
    pace_retention_s: float = 60.0
    #: The machine's limits: single-row inserts, rows updated, Redis round trips.
    limit_inserts: int = 5_000
    limit_updated_rows: int = 50_000
    limit_round_trips: int = 10_000
    #: The store's cost of one task: tasks enqueued one call each, then drained.
    cost_n: int = 10_000
    #: The sharded store (ATF): the shard counts drained, and each shard's CPU quota (cores).
    shard_counts: tuple[int, ...] = (1, 2, 3)
    shard_cpu: float = 0.1


@dataclass(kw_only=True)
class Target:
    """One system under test: its driver module, environment and connections."""

    driver: ModuleType
    env: Env
    #: What went short in this run (tasks not finished in time), for the report's notes.
    notes: list[str] = field(default_factory=list)
    #: A wait ends early when no task at all finished within this many seconds.
    none_started_s: float = 30.0

    @property
    def name(self) -> str:
        return self.driver.NAME

    @property
    def redis(self) -> redis.Redis:
        return redis.Redis.from_url(self.env.redis_url)

    def python(self) -> str:
        return str(ATF_PYTHON if self.name == "atf" else PEERS_PYTHON)

    def reset(self) -> None:
        services.flush(self.env.redis_url)
        services.empty_tables(self.env.pg_dsn, self.driver.SCHEMA)

    def produce(self, **spec: object) -> float:
        """Run a producer process; return the seconds its enqueue loop took."""
        command = [self.python(), "-m", "bench.producer", self.name, json.dumps(spec)]
        done = subprocess.run(command, env={**os.environ, **self._variables()}, cwd=ROOT,
                              capture_output=True, text=True, timeout=1800, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"producer of {self.name} failed: {done.stderr[-3000:]}")
        return json.loads(done.stdout.strip().splitlines()[-1])["seconds"]

    def _variables(self) -> dict[str, str]:
        if hasattr(self.driver, "variables"):
            return self.driver.variables(self.env)
        return self.env.variables()

    def backlog(self, task: str, key: str, n: int) -> None:
        """Enqueue `n` tasks as fast as the system allows (not timed)."""
        fast = self.driver.HAS_BULK or hasattr(self.driver.Client, "backlog")
        self.produce(task=task, key=key, n=n, mode="bulk" if fast else "burst")

    def wait_records(self, key: str, n: int, *, timeout_s: float,
                     fleet: Fleet | None = None) -> list[tuple[float, float, float]]:
        """Wait until `n` tasks recorded themselves under `key`, or the timeout passed, or
        `none_started_s` passed without any task of `key` finished (a starved system)."""
        began = time.monotonic()
        deadline = began + timeout_s
        client = self.redis
        recorded = getattr(self.driver, "record_key", lambda key: key)(key)
        while (done := client.llen(recorded)) < n and time.monotonic() < deadline:
            if not done and time.monotonic() - began > self.none_started_s:
                break
            if fleet is not None:
                fleet.check_alive()
            time.sleep(0.05)
        rows = self.driver.records(client, key)
        if len(rows) < n:
            waited = time.monotonic() - began
            note = f"{self.name}: only {len(rows)} of {n} tasks of {key!r} finished within " \
                   f"{waited:.0f} s"
            logger.warning("%s", note)
            self.notes.append(note)
        return rows

    def fleet(self, *, per_lambda: bool = False) -> Fleet:
        """The system's workers; `per_lambda`: one worker per lambda, where the driver has it."""
        if per_lambda:
            return Fleet(self.name, self.driver.per_lambda_commands(self.env))
        return Fleet(self.name, self.driver.worker_commands(self.env))

    def warm_up(self, fleet: Fleet, *, timeout_s: float) -> None:
        self.produce(task="record", key="warm", n=WARMUP_TASKS, mode="paced", rate=20.0)
        self.wait_records("warm", WARMUP_TASKS, timeout_s=timeout_s, fleet=fleet)


def _rss(fleet: Fleet) -> dict[str, float]:
    """Each role's peak RSS, and the peak of all the fleet's processes together."""
    return {**{f"rss_{role}": rss / MB for role, rss in fleet.peak_rss.items()},
            "rss_total": fleet.peak_total / MB}


def enqueue_single(target: Target, plan: Plan) -> dict[str, float]:
    target.reset()
    seconds = target.produce(task="record", key="enq", n=plan.enqueue_n, mode="burst")
    return {"enqueue_single": plan.enqueue_n / seconds}


def enqueue_in_transaction(target: Target, plan: Plan) -> dict[str, float]:
    """ms per `schedule()` call made inside one open transaction of the caller's (ATF)."""
    if not hasattr(target.driver.Client, "transaction"):
        return {}
    target.reset()
    n = plan.in_transaction_n
    seconds = target.produce(task="record", key="enq", n=n, mode="in_transaction")
    return {"enqueue_in_txn_ms": seconds / n * 1000}


def enqueue_bulk(target: Target, plan: Plan) -> dict[str, float]:
    if not target.driver.HAS_BULK:
        return {}
    target.reset()
    seconds = target.produce(task="record", key="enq", n=plan.enqueue_n, mode="bulk")
    return {"enqueue_bulk": plan.enqueue_n / seconds}


def drained_rows(target: Target, plan: Plan, fleet: Fleet, *,
                 keep_rows: bool = False) -> list[tuple[float, float, float]]:
    """The records of `plan.drain_n` tasks enqueued before `fleet` starts and drained by it;
    `keep_rows`: the task tables are not emptied first (the caller has seen to them)."""
    if keep_rows:
        services.flush(target.env.redis_url)
    else:
        target.reset()
    target.backlog("record", "drain", plan.drain_n)
    with fleet:
        return target.wait_records("drain", plan.drain_n, timeout_s=plan.drain_timeout_s,
                                   fleet=fleet)


def drain_with(target: Target, plan: Plan, fleet: Fleet, *, keep_rows: bool = False) -> float:
    """The drain rate of `drained_rows`."""
    return drain_rate(drained_rows(target, plan, fleet, keep_rows=keep_rows))


def watch_servers(target: Target, fleet: Fleet) -> Fleet:
    """Have `fleet` sample the CPU of the system's servers too: Redis, and PostgreSQL for a
    system whose tasks live there. (Every client of the PostgreSQL server counts: a figure of
    a shared server holds its other work too.)"""
    fleet.watch("redis", services.redis_pid(target.env.redis_url))
    if target.driver.SCHEMA:
        fleet.watch("postgres", services.postmaster_pid(target.env.pg_dsn))
    return fleet


def cpu_per_task(fleets: list[Fleet], rows: list[tuple[float, float, float]],
                 figure: str) -> dict[str, float]:
    """`cpu_<figure>_<role>`: µs of CPU each role of the fleets (and each server they watch)
    used per task finished, over the span `drain_rate` divides by (first start to last end)."""
    first_start = min(start for _due, start, _end in rows)
    last_end = max(end for _due, _start, end in rows)
    return {f"cpu_{figure}_{role}": seconds * 1e6 / len(rows)
            for fleet in fleets for role, seconds in fleet.cpu_between(first_start,
                                                                      last_end).items()}


def _drain_figures(target: Target, plan: Plan, fleet: Fleet, figure: str) -> dict[str, float]:
    """`fleet`'s drain rate as `figure`, and its CPU per task by process (`cpu_<figure>_*`)."""
    rows = drained_rows(target, plan, watch_servers(target, fleet))
    return {figure: drain_rate(rows), **cpu_per_task([fleet], rows, figure)}


def drain(target: Target, plan: Plan) -> dict[str, float]:
    fleet = target.fleet()
    return {**_drain_figures(target, plan, fleet, "drain"), **_rss(fleet)}


def drain_per_core(target: Target, plan: Plan) -> dict[str, float]:
    """The drain again with a worker process per core (ATF only; the peers' own drain already
    runs as they are deployed: Dramatiq a process per core, Huey one process)."""
    per_core = getattr(target.driver, "per_core_commands", None)
    if per_core is None:
        return {}
    return _drain_figures(target, plan, Fleet(target.name, per_core(target.env)),
                          "drain_per_core")


#: drain_limited's concurrency: far above the fleet's executors, so it never binds.
UNBINDING_CONCURRENCY = 1_000_000


#: How many pairs drain_limited has drained in this run: every other pair drains with the
#: limit first, so that whatever the second drain of a pair pays (or is spared) falls on each
#: side alike.
_LIMITED_PAIRS = itertools.count()


def drain_limited(target: Target, plan: Plan) -> dict[str, float]:
    """The drain again with a flow limit that never binds (`concurrency` far above the fleet's
    executors; ATF only): what enforcing a limit costs each claim and finish. Each repetition
    drains twice, back to back, with and without the limit, in turns (plain first, then limited
    first: ABBA); `drain_limited_ratio` is the pair's quotient, which the machine's load between
    one measurement and the next (the plain `drain` runs all its repetitions first) does not
    move, nor the order within a pair."""
    limit = getattr(target.driver, "limit_command", None)
    if limit is None:
        return {}
    fleet = watch_servers(target, target.fleet())

    def limited_rows() -> list[tuple[float, float, float]]:
        run_once(limit(target.env, "--concurrency", str(UNBINDING_CONCURRENCY)))
        try:
            return drained_rows(target, plan, fleet)
        finally:
            run_once(limit(target.env, "--concurrency", "code"))

    limited_first = next(_LIMITED_PAIRS) % 2 == 1
    if limited_first:
        rows = limited_rows()
        plain = drain_with(target, plan, target.fleet())
    else:
        plain = drain_with(target, plan, target.fleet())
        rows = limited_rows()
    limited = drain_rate(rows)
    return {"drain_limited": limited, "drain_limited_ratio": limited / plain,
            "drain_limited_first": float(limited_first),
            **cpu_per_task([fleet], rows, "drain_limited")}


def drain_one_process(target: Target, plan: Plan) -> dict[str, float]:
    """The drain again, the consumer a thread of the worker process (`runworker
    --with-consumer`, ATF only): the smallest deployment, and its memory."""
    if not hasattr(target.driver, "one_process_commands"):
        return {}
    fleet = Fleet(target.name, target.driver.one_process_commands(target.env))
    return {"drain_one_process": drain_with(target, plan, fleet),
            "rss_one_process": fleet.peak_total / MB}


def _api(target: Target) -> tuple[Fleet, str, str]:
    """The API for remote workers (not yet started), its URL, and a worker token."""
    token = run_once(target.driver.worker_token_command(target.env)).strip().splitlines()[-1]
    port = services.free_port()
    return (Fleet(target.name, [target.driver.web_command(target.env, port)]),
            f"http://127.0.0.1:{port}", token)


def remote_drain_fleet(target: Target, url: str, token: str) -> Fleet:
    """The consumer, and the drain's worker reaching ATF through the API at `url`."""
    return Fleet(target.name, [target.driver.worker_commands(target.env)[0],  # the consumer
                               *target.driver.remote_worker_commands(target.env, url, token)])


def drain_remote(target: Target, plan: Plan) -> dict[str, float]:
    """The drain again, its worker remote: the same process reaching ATF through the API."""
    if not hasattr(target.driver, "remote_worker_commands"):
        return {}
    target.reset()
    target.backlog("record", "drain", plan.drain_n)
    api, url, token = _api(target)
    with api:
        services.wait_for_port(int(url.rsplit(":", 1)[1]), timeout_s=30)
        with watch_servers(target, remote_drain_fleet(target, url, token)) as fleet:
            rows = target.wait_records("drain", plan.drain_n, timeout_s=plan.drain_timeout_s,
                                       fleet=fleet)
    return {"drain_remote": drain_rate(rows),
            **cpu_per_task([fleet, api], rows, "drain_remote")}


def connections(target: Target, plan: Plan) -> dict[str, float]:
    """PostgreSQL connections held by `connection_workers` idle worker processes, direct and
    remote, once each has registered and heartbeated (ATF only)."""
    if not hasattr(target.driver, "remote_worker_commands"):
        return {}
    n = plan.connection_workers
    pg_port = int(services.port_of(target.env.pg_dsn))
    target.reset()
    direct = target.driver.direct_worker_commands(target.env, processes=n, threads=1,
                                                  lambdas=("demo.noop",))
    with Fleet(target.name, direct) as fleet:
        _wait_registered(target, n, fleet)
        held_direct = fleet.connections_to(pg_port)
    api, url, token = _api(target)
    with api:
        services.wait_for_port(int(url.rsplit(":", 1)[1]), timeout_s=30)
        remote = target.driver.remote_worker_commands(target.env, url, token, processes=n,
                                                      threads=1, lambdas=("demo.noop",))
        with Fleet(target.name, remote) as fleet:
            _wait_registered(target, n, fleet)
            held_remote = fleet.connections_to(pg_port)
            held_api = api.connections_to(pg_port)
    return {"pg_conns_direct": held_direct.get("worker", 0),
            "pg_conns_remote": held_remote.get("worker", 0),
            "pg_conns_api": held_api.get("api", 0)}


def _wait_registered(target: Target, n: int, fleet: Fleet) -> None:
    """Until the fleet's `n` workers run and each has heartbeated once since it registered."""
    deadline = time.monotonic() + 180
    while services.live_workers(target.env.pg_dsn, since=fleet.started_at) < n:
        fleet.check_alive()
        if time.monotonic() > deadline:
            raise RuntimeError(f"{n} workers did not all start within 180 s")
        time.sleep(0.5)


def lateness(target: Target, plan: Plan, fleet: Fleet) -> dict[str, float]:
    """With `fleet` running: immediate schedule -> start at a light rate, then delivery of
    delayed tasks."""
    target.warm_up(fleet, timeout_s=120)
    target.produce(task="record", key="imm", n=plan.immediate_n, mode="paced",
                   rate=plan.immediate_rate)
    immediate = stats.lateness_ms(target.wait_records("imm", plan.immediate_n,
                                                      timeout_s=60, fleet=fleet))
    target.produce(task="record", key="late", n=plan.delayed_n, mode="delayed",
                   delay_min=plan.delay_min_s, delay_max=plan.delay_max_s)
    delayed = stats.lateness_ms(target.wait_records("late", plan.delayed_n,
                                                    timeout_s=plan.delay_max_s + 60,
                                                    fleet=fleet))
    return {"immediate_p50": immediate["p50"], "immediate_p95": immediate["p95"],
            "immediate_p99": immediate["p99"],
            **{f"late_{name}": value for name, value in delayed.items()}}


def latency(target: Target, plan: Plan) -> dict[str, float]:
    """`lateness` of the system's workers, and their memory."""
    target.reset()
    with target.fleet() as fleet:
        figures = lateness(target, plan, fleet)
    return {**figures, **_rss(fleet)}


def _isolation(target: Target, plan: Plan, *, per_lambda: bool) -> float:
    target.reset()
    target.backlog("noop", "a", plan.backlog_n)
    b_n = int(plan.b_rate * plan.b_seconds)
    with target.fleet(per_lambda=per_lambda) as fleet:
        target.warm_up(fleet, timeout_s=plan.wait_s)
        target.produce(task="record", key="iso", n=b_n, mode="paced", rate=plan.b_rate)
        rows = target.wait_records("iso", b_n, timeout_s=plan.wait_s, fleet=fleet)
    return stats.lateness_ms(rows)["p95"]


def isolation(target: Target, plan: Plan) -> dict[str, float]:
    """B's lateness p95 at `b_rate` tasks/s while the same workers drain A's backlog."""
    return {"isolation_p95": _isolation(target, plan, per_lambda=False)}


def isolation_per_lambda(target: Target, plan: Plan) -> dict[str, float]:
    """The same with one worker process per lambda (ATF's recommended deployment)."""
    if not hasattr(target.driver, "per_lambda_commands"):
        return {}
    return {"isolation_own_p95": _isolation(target, plan, per_lambda=True)}


def _post_loop(port: int, path: str, body: bytes, token: str, count: int,
               failures: list[str]) -> None:
    head = (f"POST {path} HTTP/1.1\r\n"
            f"Host: 127.0.0.1\r\nAuthorization: Token {token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n").encode()
    for _ in range(count):
        with socket.create_connection(("127.0.0.1", port)) as conn:
            conn.sendall(head + body)
            answer = b""
            while chunk := conn.recv(65536):
                answer += chunk
        if not answer.startswith(b"HTTP/1.1 201"):
            failures.append(answer[:300].decode(errors="replace"))


def _post_many(port: int, path: str, body: bytes, token: str, count: int, threads: int) -> float:
    failures: list[str] = []
    share = [count // threads + (i < count % threads) for i in range(threads)]
    workers = [threading.Thread(target=_post_loop, args=(port, path, body, token, n, failures))
               for n in share]
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    seconds = time.perf_counter() - started
    if failures:
        raise RuntimeError(f"{len(failures)} requests failed, e.g. {failures[0]}")
    return seconds


#: Client threads sending requests to the API (gunicorn runs 2 sync workers).
REST_CLIENT_THREADS = 4
REST_BATCH = 1000
SINGLE = "/api/v1/tasks/"
BATCH = "/api/v1/tasks/batch/"


def rest(target: Target, plan: Plan) -> dict[str, float]:
    """Requests/s of single POSTs (and the API's CPU µs per POST) and tasks/s through the
    batch endpoint (ATF only)."""
    if not hasattr(target.driver, "api_command"):
        return {}
    target.reset()
    token = run_once(target.driver.token_command(target.env)).strip().splitlines()[-1]
    port = services.free_port()
    single = json.dumps({"lambda": "demo.noop", "payload": {}}).encode()
    batch = json.dumps({"tasks": [{"lambda": "demo.noop", "payload": {}}] * REST_BATCH}).encode()
    with Fleet(target.name, [target.driver.api_command(target.env, port)]) as api:
        services.wait_for_port(port, timeout_s=30)
        _post_many(port, SINGLE, single, token, 20, REST_CLIENT_THREADS)  # warm both workers up
        started = time.time()
        single_s = _post_many(port, SINGLE, single, token, plan.rest_single_n, REST_CLIENT_THREADS)
        ended = time.time()
        batches = max(1, plan.rest_batch_n // REST_BATCH)
        batch_s = _post_many(port, BATCH, batch, token, batches, 2)
    # The API's CPU per single POST: what a loaded machine's requests/s leave out.
    api_s = sum(api.cpu_between(started, ended).values())
    return {"rest_single": plan.rest_single_n / single_s,
            "cpu_rest_single_api": api_s * 1e6 / plan.rest_single_n,
            "rest_batch": batches * REST_BATCH / batch_s}


def store_cost_per_task(target: Target, plan: Plan) -> dict[str, float]:
    """What one task costs the PostgreSQL server (systems whose store is PostgreSQL)."""
    return store_cost.measure(target, plan.cost_n, timeout_s=plan.drain_timeout_s)


#: Measurements in the order they run; each interleaves the systems within a repetition.
MEASUREMENTS = (enqueue_single, enqueue_in_transaction, enqueue_bulk, rest, drain,
                drain_per_core, drain_limited, drain_one_process, drain_remote, connections,
                latency, isolation, isolation_per_lambda, store_cost_per_task)
