"""One team floods the service; does another team's work keep flowing?

    python -m tests.chaos.flood [--tasks 300] [--rate 30] [--claims 64]

Runs ATF as real processes on a database and a Redis of its own (as the chaos run does): the
API (gunicorn, the project's config, `DJANGO_DEBUG=0`; one process of 32 threads, or
`--web-processes 2 --web-threads 128` as the config ships), a consumer, and a remote worker of team
`demo`. Team `demo` schedules `--tasks` `demo.noop` tasks at `--rate` a second through the API,
twice: once alone (quiet), once while team `flood` floods: `--claims` long-polling claims from
four worker tokens (20 s each, sent again as soon as answered), batches of 1,000 tasks sent
back to back, as many one-second periodic schedules as it may add, single tasks and reads of
its task list sent back to back. It prints team demo's delivery latency (`started_at - run_at`)
and the API's answer time to its `POST /api/v1/tasks/`, p50 and p95 of each in both runs, with
the load average at each run's start and end, and exits 1 when a flooded p95 is over twice the
quiet one.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import os
import sys
import tempfile
import threading
import time
from collections import Counter
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event as EventType
from pathlib import Path
from typing import Any

import requests

from bench.stats import percentile
from tests.chaos import cpu
from tests.chaos.cli import CHILD_SETTINGS, api_token
from tests.chaos.services import ChaosDatabase, PrivateRedis, say
from tests.ports import free_port

#: Worker tokens team flood spreads its claims over.
FLOOD_TOKENS = 4
#: What team flood may send (`--flood`).
FLOOD_KINDS = ("claims", "batches", "periodic", "posts", "reads")
#: Team flood's threads sending single tasks, and reading its task list, back to back: each
#: kind alone fills half of its team's share of requests in progress (a quarter of the API's 32
#: threads), so the scheduling rate, not the count, is what bounds them.
POSTERS = READERS = 4
#: Largest flooded p95 that passes, as a multiple of the quiet one.
MOST_SLOWDOWN = 2.0
#: The shipped heartbeat (every 5 s; a call gives up after one interval) instead of the fault
#: runs' 0.5 s: the flood measures delivery, not how soon a lost worker is found, and with a
#: 0.5 s heartbeat team demo's remote worker replaced itself whenever one answer of the flooded
#: API took longer (7 times in one 30 s run), its tasks waiting meanwhile.
HEARTBEAT = {"ATF_HEARTBEAT_INTERVAL_S": "5", "ATF_HEARTBEAT_TIMEOUT_S": "30"}


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.flood", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=300, help="team demo's tasks per run")
    parser.add_argument("--rate", type=float, default=30.0, help="team demo's tasks a second")
    parser.add_argument("--claims", type=int, default=64, help="team flood's waiting claims")
    parser.add_argument("--flood", default=",".join(FLOOD_KINDS),
                        help="what team flood sends, comma separated, of "
                             f"{','.join(FLOOD_KINDS)} (default all)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a setting of every process, e.g. ATF_API_THROTTLE_RATE=3000/min")
    parser.add_argument("--web-processes", type=int, default=1,
                        help="API processes (the gunicorn config's default: 2)")
    parser.add_argument("--web-threads", type=int, default=32,
                        help="threads of each API process (the gunicorn config's default: 128)")
    parser.add_argument("--flood-api", choices=("shared", "own"), default="shared",
                        help="own: team flood sends to an API server of its own (same database "
                             "and Redis), to tell what the shared API process costs team demo "
                             "from what the shared host does")
    parser.add_argument("--database", default="atf_chaos_flood")
    parser.add_argument("--pg-host", default="127.0.0.1")
    parser.add_argument("--pg-port", type=int, default=5432)
    parser.add_argument("--pg-user", default="postgres")
    return parser.parse_args(argv)


class Flood:
    """Team flood's threads: long polls, batches and periodic schedules, until stopped."""

    def __init__(self, url: str, *, full_token: str, worker_tokens: list[str],
                 claims: int, kinds: set[str]) -> None:
        self.url = url
        self.answers: Counter[str] = Counter()  #: "<kind> <status>"
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._full = full_token
        self._threads = [threading.Thread(target=self._claims, args=(worker_tokens[n % len(
            worker_tokens)], n % len(worker_tokens)), daemon=True)
            for n in range(claims if "claims" in kinds else 0)]
        if "batches" in kinds:
            self._threads += [threading.Thread(target=self._batches, daemon=True)
                              for _ in range(2)]
        if "periodic" in kinds:
            self._threads.append(threading.Thread(target=self._schedules, daemon=True))
        if "posts" in kinds:
            self._threads += [threading.Thread(target=self._posts, daemon=True)
                              for _ in range(POSTERS)]
        if "reads" in kinds:
            self._threads += [threading.Thread(target=self._reads, daemon=True)
                              for _ in range(READERS)]

    def _post(self, kind: str, path: str, body: dict, token: str,
              timeout_s: float = 30) -> requests.Response | None:
        try:
            answer = requests.post(f"{self.url}{path}", json=body, timeout=timeout_s,
                                   headers={"Authorization": f"Token {token}"})
        except requests.RequestException:
            answer = None
        with self._lock:
            self.answers[f"{kind} {answer.status_code if answer is not None else 'none'}"] += 1
        return answer

    def _claims(self, token: str, index: int) -> None:
        worker = f"flood-host:{index}:w"
        self._post("register", "/api/v1/worker/register/", {
            "worker": worker, "host": "flood", "pid": index, "lambdas": ["flood.work"],
            "threads": 1}, token)
        while not self._stop.is_set():
            answer = self._post("claim", "/api/v1/worker/claim/",
                                {"worker": worker, "max": 1, "wait_s": 20}, token)
            if answer is None or answer.status_code != 200:  # as a remote worker waits
                self._stop.wait(float(answer.headers.get("Retry-After", 1)) if answer else 1)

    def _batches(self) -> None:
        body = {"tasks": [{"lambda": "flood.work", "payload": {"n": n}} for n in range(1000)]}
        while not self._stop.is_set():
            answer = self._post("batch", "/api/v1/tasks/batch/", body, self._full)
            if answer is None or answer.status_code != 201:  # as a client backs off
                self._stop.wait(float(answer.headers.get("Retry-After", 1)) if answer else 1)

    def _posts(self) -> None:
        while not self._stop.is_set():
            answer = self._post("post", "/api/v1/tasks/", {"lambda": "flood.work"}, self._full)
            if answer is None or answer.status_code != 201:  # as a client backs off
                self._stop.wait(float(answer.headers.get("Retry-After", 1)) if answer else 1)

    def _reads(self) -> None:
        while not self._stop.is_set():
            try:
                answer = requests.get(f"{self.url}/api/v1/tasks/?page_size=100", timeout=30,
                                      headers={"Authorization": f"Token {self._full}"})
            except requests.RequestException:
                answer = None
            with self._lock:
                self.answers[f"read {answer.status_code if answer is not None else 'none'}"] += 1
            if answer is None or answer.status_code != 200:
                self._stop.wait(float(answer.headers.get("Retry-After", 1)) if answer else 1)

    def _schedules(self) -> None:
        """As many one-second schedules as the team may add (429 naming the setting ends it)."""
        made = 0
        while not self._stop.is_set():
            answer = self._post("periodic", "/api/v1/periodic-tasks/", {
                "name": f"flood-{made}", "lambda": "flood.work", "interval_s": 1}, self._full)
            if answer is not None and answer.status_code == 201:
                made += 1
            elif answer is not None and "PERIODIC" in answer.text:
                return

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)


def _flood(url: str, options: dict, stop: EventType, answers: Queue) -> None:
    flood = Flood(url, **options)
    flood.start()
    stop.wait()
    flood.stop()
    answers.put(flood.answers)


class FloodProcess:
    """Team flood in a process of its own: its many threads would otherwise share one
    interpreter lock with team demo's client, whose answer times the run measures."""

    def __init__(self, url: str, **options: object) -> None:
        context = multiprocessing.get_context("spawn")
        self._stop = context.Event()
        self._answers: Queue = context.Queue()
        self._process = context.Process(target=_flood, daemon=True,
                                        args=(url, options, self._stop, self._answers))
        self._process.start()

    @property
    def pid(self) -> int:
        return self._process.pid or 0

    def stop(self) -> Counter[str]:
        """Stop it; its answers, counted by kind and status."""
        self._stop.set()
        answers = self._answers.get(timeout=60)
        self._process.join(timeout=30)
        return answers


#: The stages of a task's delivery delay: (name, from field, to field).
STAGES = (("delivery", "run_at", "started_at"), ("consumer", "run_at", "enqueued_at"),
          ("claim", "enqueued_at", "claimed_at"), ("start", "claimed_at", "started_at"))


def deliver(url: str, token: str, *, tasks: int,
            rate: float, label: str) -> dict[str, list[float]]:
    """Schedule `tasks` demo.noop tasks at `rate` a second, wait until all succeeded; for each
    of STAGES, its seconds for each task, sorted: delivery (started_at - run_at) and its parts,
    the consumer's (to enqueued_at), the claim's (to claimed_at) and the start's; and under
    "answer", the seconds each `POST` took to answer, sorted; under "load", the load average
    (1 minute) at the run's start and end."""
    from tasks_core.models import TaskEntity

    ids: list[int] = []
    answer_s: list[float] = []
    load = [os.getloadavg()[0]]
    started = time.monotonic()
    for n in range(tasks):
        time.sleep(max(0.0, started + n / rate - time.monotonic()))
        sent = time.perf_counter()
        answer = requests.post(f"{url}/api/v1/tasks/", json={"lambda": "demo.noop"},
                               headers={"Authorization": f"Token {token}"}, timeout=60)
        answer_s.append(time.perf_counter() - sent)
        answer.raise_for_status()
        ids.append(answer.json()["id"])
    load.append(os.getloadavg()[0])
    deadline = time.monotonic() + 120
    while (done := TaskEntity.objects.filter(pk__in=ids, status="success").count()) < tasks:
        if time.monotonic() > deadline:
            raise SystemExit(f"{label}: only {done} of {tasks} tasks succeeded in 120 s")
        time.sleep(0.5)
    rows = list(TaskEntity.objects.filter(pk__in=ids).values(
        *{field for _name, *fields in STAGES for field in fields}))
    return {"answer": sorted(answer_s), "load": load,
            **{name: sorted((row[to] - row[since]).total_seconds() for row in rows)
               for name, since, to in STAGES}}


def _prepare_flood_team() -> tuple[str, list[str]]:
    """Team flood with the lambda row its tasks use (no code runs it); its tokens."""
    from tasks_core.models import Lambda, Team

    team, _created = Team.objects.get_or_create(name="flood")
    Lambda.objects.get_or_create(name="flood.work", defaults={"team": team, "in_code": False})
    full = api_token(team="flood", user="flood")
    workers = [api_token("--worker", team="flood", user=f"flood-worker-{n}")
               for n in range(FLOOD_TOKENS)]
    if full is None or None in workers:
        raise SystemExit("could not make team flood's tokens (atf_token)")
    return full, [token for token in workers if token]


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.WARNING)
    log_dir = Path(tempfile.mkdtemp(prefix="atf-flood-"))
    database = ChaosDatabase(args.database, host=args.pg_host, port=args.pg_port,
                             user=args.pg_user)
    database.recreate()
    server = PrivateRedis(free_port(), log_dir)
    server.start()
    env = {**os.environ, **CHILD_SETTINGS, **HEARTBEAT, "DJANGO_DEBUG": "0",
           "DATABASE_URL": database.url,
           "REDIS_URL": server.url, "ATF_QUEUE_PREFIX": "flood",
           **dict(item.split("=", 1) for item in args.set)}
    os.environ.update({**env, "ATF_LOG_LEVEL": "WARNING"})
    say(f"flood: database {database.name}, redis port {server.port}, logs in {log_dir}")
    try:
        return _run(args, env, log_dir, redis_pid=server.process.pid if server.process else 0)
    finally:
        server.stop()
        database.drop()


def _run(args: argparse.Namespace, env: dict[str, str], log_dir: Path, *,
         redis_pid: int) -> int:
    import django

    django.setup()
    from django.core.management import call_command

    from tests.chaos.cluster import Cluster

    call_command("migrate", verbosity=0)
    demo_token = api_token()
    cluster = Cluster(env=env, database_nodes=[(args.pg_host, args.pg_port)],
                      workers=0, consumers=1, threads=8, log_dir=log_dir,
                      web_processes=args.web_processes, web_threads=args.web_threads,
                      worker_token=api_token("--worker", user="demo-worker"))
    (log_dir / "flood-api").mkdir()
    flood_api = (None if args.flood_api == "shared" else Cluster(
        env=env, database_nodes=[(args.pg_host, args.pg_port)], workers=0, consumers=0,
        threads=8, log_dir=log_dir / "flood-api", web_processes=args.web_processes,
        web_threads=args.web_threads))
    cluster.start()
    if flood_api is not None:
        flood_api.start()
    try:
        assert demo_token is not None, "atf_token made no token"
        full, workers = _prepare_flood_team()
        roots = {"demo client": os.getpid(), "redis": redis_pid,
                 **{child.name: child.pid for child in cluster.children if child.pid}}
        if flood_api is not None:
            roots.update({f"flood {child.name}": child.pid for child in flood_api.children
                          if child.pid})
        quiet = deliver_measured(args, cluster.api_url, demo_token, roots, "quiet")
        flood = FloodProcess((flood_api or cluster).api_url, full_token=full,
                             worker_tokens=workers, claims=args.claims,
                             kinds=set(args.flood.split(",")))
        try:
            time.sleep(3.0)  # let the flood fill the server before team demo measures
            flooded = deliver_measured(args, cluster.api_url, demo_token,
                                       {**roots, "flood client": flood.pid}, "flooded")
        finally:
            answers = flood.stop()
    finally:
        cluster.stop()
        if flood_api is not None:
            flood_api.stop()
    return report(args, quiet, flooded, answers)


def deliver_measured(args: argparse.Namespace, url: str, token: str, roots: dict[str, int],
                     label: str) -> dict[str, Any]:
    """deliver(), with under "cores" (name, cores) of each group of processes of the run: the
    processor seconds it used a second of the run, greatest first."""
    before, since = cpu.sample(roots, args.database), time.monotonic()
    run = deliver(url, token, tasks=args.tasks, rate=args.rate, label=label)
    after, wall_s = cpu.sample(roots, args.database), time.monotonic() - since
    used = {name: (after[name] - before[name]) / wall_s for name in after}
    return {**run, "cores": sorted(used.items(), key=lambda item: -item[1])}


def report(args: argparse.Namespace, quiet: dict[str, Any], flooded: dict[str, Any],
           answers: Counter[str]) -> int:
    """Print both runs' figures; 0 when each flooded p95 is within MOST_SLOWDOWN of its quiet
    one, else 1."""
    def ms(run: dict[str, Any], name: str, fraction: float) -> str:
        return f"{percentile(run[name], fraction) * 1000:.0f}"

    say(f"team demo's {args.tasks} tasks at {args.rate:g}/s, team flood sending {args.flood}:")
    for label, run in (("quiet", quiet), ("flooded", flooded)):
        say(f"  {label + ':':8} load {run['load'][0]:.1f}-{run['load'][1]:.1f}; delivery "
            f"(started_at - run_at) p50 {ms(run, 'delivery', 0.5)} ms, p95 "
            f"{ms(run, 'delivery', 0.95)} ms (p95 of its parts: " + ", ".join(
                f"{name} {ms(run, name, 0.95)} ms" for name, *_fields in STAGES[1:])
            + f"); POST answer p50 {ms(run, 'answer', 0.5)} ms, p95 {ms(run, 'answer', 0.95)} ms")
        say(f"  {'':8} cores used: {sum(used for _name, used in run['cores']):.2f} (" + ", ".join(
            f"{name} {used:.2f}" for name, used in run["cores"]) + ")")
    within = True
    for name in ("delivery", "answer"):
        ratio = percentile(flooded[name], 0.95) / percentile(quiet[name], 0.95)
        within &= ratio <= MOST_SLOWDOWN
        say(f"  flooded {name} p95: {ratio:.2f}x the quiet p95")
    say(f"  team flood's answers: {dict(sorted(answers.items()))}")
    return 0 if within else 1


if __name__ == "__main__":
    raise SystemExit(main())
