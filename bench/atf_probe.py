"""In-process probes of ATF's store: `python -m bench.atf_probe pass ROUNDS DUE`,
`… explain`, `… reads ROUNDS`, `… rollup`, `… prune ROUNDS AGE_S`, `… queue SECONDS`,
`… pace SECONDS RATE RETENTION_S`, `… schedule ROUNDS CALLS` or `… shards`. They
run in the project's venv with the bench's ATF settings (or any DATABASE_URL) and print one
JSON line.

- `pass`: {"idle_ms", "busy_ms", "claim_ms"}: the median time of a consumer pass with nothing
  due, of one that enqueues DUE no-op tasks (scheduled due now before it, not timed; in a
  store with a due backlog it enqueues DUE of the backlog's, the earliest due), and of the
  claim of the DUE tasks that pass enqueued (one `store.claim`, as a worker claims what it
  popped). A pass reads the gates, takes the due rows, marks them enqueued and pushes them
  to Redis.
- `explain`: {"due": plan, "mark_enqueued": …, "claim": …, "start": …, "finish": …}: the
  `EXPLAIN (ANALYZE, BUFFERS)` of each of the store's own statements of the hot path as ten
  tasks go through one consumer pass, a claim, a start and a finish: each statement is
  explained (and rolled back) just before it runs for real, with the same parameters.
- `reads`: {"metrics_p50_ms", "metrics_p95_ms", "lambdas_…", "dashboard_…"}: GET /metrics,
  GET /api/v1/lambdas/ and the console dashboard's data (what its page polls), in-process
  through Django's test client as a superuser (every team), ROUNDS rounds of the three in turn
  after one of each to warm up. Only the request is timed, not the tasks in the store.
- `rollup`: {"seconds"}: the rollup of outcomes (counts and delivery latencies) made again from
  the task rows, as migrations 0018 and 0031 fill it: the rows `bench.store_rows` generates
  finished before the fold's mark, where no fold reaches, so without this the reads would
  count them neither in the rollup nor in its tail, unlike a store whose consumer was running
  while they finished.
- `prune`: the consumer's retention rounds on finished tasks older than AGE_S (generate them
  with `python -m bench.store_rows`): {"per_round", "round_s", "per_s_pruning",
  "per_s_consumer", "wal_bytes_per_task"}, medians over ROUNDS rounds. A consumer
  housekeeps once a HOUSEKEEPING_INTERVAL_S, so its rate is a round's tasks over the longer of
  that interval and the round. WAL is the records of this database's tables and indexes
  (pg_walinspect, PostgreSQL 15+), commit records left out.
- `queue`: {"queued", "waiting", "per_waiting"}: consumer passes for SECONDS with nobody
  claiming, so that the enqueue timeout (`ATF_ENQUEUE_TIMEOUT_S`: set it well below SECONDS)
  fires for the tasks the first passes enqueued; then the messages in demo.noop's queues
  against its tasks waiting in them (`enqueued`): a queue holds one message a task when a
  task whose message is still there is not pushed again.
- `pace`: {"scheduled", "finished_per_s", "past_max", "past_per_minute", "waiting_max"}:
  schedules demo.noop tasks at RATE a second (batches of 1,000) for SECONDS while a fleet
  whose consumers prune at RETENTION_S (`ATF_RETENTION_S`) drains them; every 10 s it counts
  the finished tasks past their retention (finished more than RETENTION_S ago) and the tasks
  not finished. `past_per_minute` is the most past their retention as a share of one
  minute's tasks (RATE × 60): at most 1 is retention keeping pace.
- `schedule`: {"ratio", "ratio_min", "ratio_max", "schedule_per_s", "insert_commit_per_s",
  "cpu_us"}: ROUNDS rounds, each CALLS single-row INSERT+COMMITs (the machine's own limit,
  `bench.limits`) and then CALLS `schedule()` calls of demo.noop, each in its own transaction,
  in this one process: the ratio of the two rates round by round (medians; on a box whose
  speed drifts from one minute to the next, only rates taken side by side compare), and the
  caller's CPU per `schedule()` (its process time).
- `shards`: {"shards": [alias, ...]}: the task store's shards as the settings name them
  (`ATF_STORE_SHARDS`, which the standalone service makes of `ATF_SHARD_URLS`); null where the
  code has no such setting. It reads the settings only: no database need exist yet.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from typing import Any


def _django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "atf_project.settings")
    import django

    django.setup()


def _setup() -> None:
    _django()
    from tasks_core import lambda_sync

    lambda_sync.sync_to_store()


def _enqueued() -> dict[int, int]:
    """Task id -> lease of every task waiting in a queue."""
    from tasks_core.models import TaskEntity

    return dict(TaskEntity.objects.filter(status="enqueued").values_list("pk", "lease"))


def _messages(before: dict[int, int]) -> list[Any]:
    """The messages of the tasks enqueued since `before` (_enqueued()): in a store with a due
    backlog a pass takes the earliest due of it, not the tasks the probe scheduled."""
    from tasks_core.queues.base import Message

    return [Message(task_id=pk, lease=lease) for pk, lease in _enqueued().items()
            if pk not in before]


def passes(rounds: int, due: int) -> dict[str, float]:
    from django.utils import timezone

    from tasks_core import atf, directory, store
    from workers.consumer import Consumer

    consumer = Consumer(batch_size=due, poll_interval_s=1.0)
    consumer.run_pass()  # connections opened and statements prepared before the clock starts
    lambda_ids = [directory.by_name("demo.noop").id]
    idle, busy, claims = [], [], []
    for round_ in range(rounds):
        started = time.perf_counter()
        consumer.run_pass()
        idle.append(time.perf_counter() - started)
        atf.schedule_many([{"lambda": "demo.noop", "payload": {}}] * due)
        before = _enqueued()
        started = time.perf_counter()
        summary = consumer.run_pass()
        busy.append(time.perf_counter() - started)
        if summary.enqueued != due:
            raise SystemExit(f"a pass enqueued {summary.enqueued} of {due} due tasks")
        messages = _messages(before)
        started = time.perf_counter()
        claimed = store.claim(messages, worker=f"bench-probe-{round_}", lambda_ids=lambda_ids,
                              now=timezone.now())
        claims.append(time.perf_counter() - started)
        if len(claimed) != due:
            raise SystemExit(f"a claim took {len(claimed)} of {due} enqueued tasks")
    return {"idle_ms": statistics.median(idle) * 1000, "busy_ms": statistics.median(busy) * 1000,
            "claim_ms": statistics.median(claims) * 1000}


def queue(seconds: float) -> dict[str, float]:
    from django.utils import timezone

    from tasks_core import stats
    from tasks_core.models import TaskEntity
    from workers.consumer import Consumer

    consumer = Consumer(batch_size=5_000, poll_interval_s=0.1)
    began = timezone.now()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        consumer.run_pass()
    queued = sum(stats.queue_depths(["demo.noop"]).get("demo.noop", {}).values())
    # Those these passes enqueued (one kept in its queue keeps its enqueued_at); not those
    # an earlier probe enqueued, whose messages went with its Redis database.
    waiting = TaskEntity.objects.filter(status="enqueued", enqueued_at__gte=began).count()
    if not waiting:
        raise SystemExit("no task was waiting in a queue: schedule some due tasks first")
    return {"queued": queued, "waiting": waiting, "per_waiting": queued / waiting}


class _Explainer:
    """While active, each statement of the store's own (run with `prepare` true or false, as
    ATF_DB_PREPARED_STATEMENTS says) is first run under
    `EXPLAIN (ANALYZE, BUFFERS)` and rolled back (a savepoint, or a transaction of its own),
    then for real; the plans are kept in order."""

    def __init__(self) -> None:
        import psycopg

        self.plans: list[str] = []
        self.original = psycopg.Cursor.execute

    def __enter__(self) -> _Explainer:
        import psycopg

        explainer, original = self, self.original

        def execute(cursor: Any, query: Any, params: Any = None, **options: Any) -> Any:
            if options.get("prepare") is not None:  # one of the store's own statements
                explainer.plans.append(explainer.plan(cursor, query, params))
            return original(cursor, query, params, **options)

        psycopg.Cursor.execute = execute
        return self

    def __exit__(self, *exc_info: object) -> None:
        import psycopg

        psycopg.Cursor.execute = self.original

    def plan(self, cursor: Any, query: str, params: Any) -> str:
        import psycopg

        idle = cursor.connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        self.original(cursor, "BEGIN" if idle else "SAVEPOINT bench_explain")
        self.original(cursor, f"EXPLAIN (ANALYZE, BUFFERS) {query}", params)
        lines = [row[0] for row in cursor.fetchall()]
        self.original(cursor, "ROLLBACK" if idle else "ROLLBACK TO SAVEPOINT bench_explain")
        return "\n".join(lines)

    def take(self, name: str) -> str:
        if not self.plans:
            raise SystemExit(f"the store ran none of its own statements for {name}")
        return self.plans.pop(0)


def explain() -> dict[str, str]:
    from django.utils import timezone

    from tasks_core import atf, directory, store
    from tasks_core.store.values import Outcome, Result
    from workers.consumer import Consumer

    consumer = Consumer(batch_size=10, poll_interval_s=1.0)
    atf.schedule_many([{"lambda": "demo.noop", "payload": {}}] * 10)
    before = _enqueued()
    plans: dict[str, str] = {}
    with _Explainer() as explainer:
        consumer.run_pass()
        plans["due"], plans["mark_enqueued"] = explainer.take("due"), explainer.take("mark")
        messages = _messages(before)
        explainer.plans.clear()
        now = timezone.now()
        claimed = store.claim(messages, worker="bench-probe",
                              lambda_ids=[directory.by_name("demo.noop").id], now=now)
        plans["claim"] = explainer.take("claim")
        store.start_many(claimed, now=now)
        plans["start"] = explainer.take("start")
        store.finish_many([(task, Result(outcome=Outcome.SUCCESS, started_at=now,
                                         worker="bench-probe")) for task in claimed], now=now)
        plans["finish"] = explainer.take("finish")
    return plans


def reads(rounds: int) -> dict[str, float]:
    from django.contrib.auth import get_user_model
    from django.test import Client
    from django.urls import reverse

    from bench.stats import percentile

    user, _ = get_user_model().objects.get_or_create(
        username="bench-reads", defaults={"is_staff": True, "is_superuser": True})
    client = Client()
    client.force_login(user)
    urls = {"metrics": "/metrics", "lambdas": "/api/v1/lambdas/",
            "dashboard": reverse("tasks_console:dashboard-data")}
    times: dict[str, list[float]] = {name: [] for name in urls}
    for round_ in range(rounds + 1):
        for name, url in urls.items():
            started = time.perf_counter()
            response = client.get(url)
            if response.status_code != 200:
                raise SystemExit(f"GET {url} answered {response.status_code}")
            if round_:  # the first round warms up
                times[name].append(time.perf_counter() - started)
    answer = {}
    for name, seconds in times.items():
        answer[f"{name}_p50_ms"] = percentile(seconds, 0.5) * 1000
        answer[f"{name}_p95_ms"] = percentile(seconds, 0.95) * 1000
    return answer


def rollup() -> dict[str, float]:
    import importlib
    from types import SimpleNamespace

    from django.apps import apps
    from django.db import connection, transaction

    from tasks_core.models import LatencyMinute, OutcomeFold, OutcomeMinute, OutcomeTotal

    started = time.perf_counter()
    editor = SimpleNamespace(connection=connection)
    with transaction.atomic():
        for model in (OutcomeFold, OutcomeMinute, OutcomeTotal, LatencyMinute):
            model.objects.all().delete()
        importlib.import_module("tasks_core.migrations.0018_outcome_rollup").fill_rollup(
            apps, editor)
        importlib.import_module("tasks_core.migrations.0031_latency_rollup").fill_latencies(
            apps, editor)
    return {"seconds": time.perf_counter() - started}


#: WAL bytes since an LSN of the records for this database's tables and indexes
#: (pg_walinspect): other databases' writes on the same server are left out, and so are the
#: commit records (a few dozen bytes a batch).
_OWN_WAL = r"""
SELECT sum(record_length) FROM pg_get_wal_records_info(%s, pg_current_wal_lsn())
WHERE (regexp_match(block_ref, 'rel \d+/(\d+)/'))[1]::oid =
      (SELECT oid FROM pg_database WHERE datname = current_database())
"""


def prune(rounds: int, age_s: float) -> dict[str, float]:
    from django.db import connection
    from django.utils import timezone

    from tasks_core import outcomes, retention
    from workers.consumer import HOUSEKEEPING_INTERVAL_S, PRUNE_BATCH_SIZE

    def wal_lsn() -> str:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_current_wal_lsn()")
            return cursor.fetchone()[0]

    with connection.cursor() as cursor:
        cursor.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
    outcomes.fold(now=timezone.now(), budget_s=float("inf"))  # as the consumer keeps it
    pruned, seconds, wal = [], [], []
    for _ in range(rounds):
        before = wal_lsn()
        started = time.perf_counter()
        pruned.append(retention.prune(now=timezone.now(), budget_s=retention.PRUNE_BUDGET_S,
                                      batch_size=PRUNE_BATCH_SIZE, older_than_s=age_s))
        seconds.append(time.perf_counter() - started)
        with connection.cursor() as cursor:
            cursor.execute(_OWN_WAL, [before])
            wal.append(float(cursor.fetchone()[0] or 0))
    if not all(pruned):
        raise SystemExit(f"a round found nothing to prune ({pruned}): generate more tasks")
    per_round, round_s = statistics.median(pruned), statistics.median(seconds)
    return {"per_round": per_round, "round_s": round_s, "per_s_pruning": per_round / round_s,
            "per_s_consumer": per_round / max(HOUSEKEEPING_INTERVAL_S, round_s),
            "wal_bytes_per_task": sum(wal) / sum(pruned)}


def schedule_ratio(rounds: int, calls: int) -> dict[str, float]:
    import psycopg
    from django.db import connection

    from bench.limits import TABLE as LIMIT_TABLE
    from bench.limits import insert_commit_rate
    from tasks_core import atf

    if connection.vendor != "postgresql":
        raise SystemExit("schedule: DATABASE_URL must name a PostgreSQL database")
    # The loop runs on the database schedule() writes to, as the same user: libpq reads
    # DATABASE_URL itself (its hosts, password and options), as ATF's settings do.
    dsn = os.environ["DATABASE_URL"]
    for _ in range(min(calls, 300)):  # connections opened, statements prepared
        atf.schedule("demo.noop", {})
    ratios, schedules, inserts, cpu = [], [], [], []
    for _ in range(rounds):
        inserts.append(insert_commit_rate(dsn, calls))
        started, process_started = time.perf_counter(), time.process_time()
        for _ in range(calls):
            atf.schedule("demo.noop", {})
        schedules.append(calls / (time.perf_counter() - started))
        cpu.append((time.process_time() - process_started) * 1e6 / calls)
        ratios.append(schedules[-1] / inserts[-1])
    with psycopg.connect(dsn, autocommit=True) as admin:  # the loop's table, no longer needed
        admin.execute(f"DROP TABLE IF EXISTS {LIMIT_TABLE}")
    return {"ratio": statistics.median(ratios), "ratio_min": min(ratios),
            "ratio_max": max(ratios), "schedule_per_s": statistics.median(schedules),
            "insert_commit_per_s": statistics.median(inserts), "cpu_us": statistics.median(cpu)}


#: Seconds between two counts of the pace probe.
PACE_SAMPLE_S = 10.0


def pace(seconds: float, rate: float, retention_s: float) -> dict[str, float]:
    from datetime import timedelta

    from django.utils import timezone

    from tasks_core import atf, states
    from tasks_core.models import TaskEntity

    batch = 1_000
    began = time.monotonic()
    scheduled, past_max, waiting_max = 0, 0, 0
    next_sample = began + PACE_SAMPLE_S
    while (now_s := time.monotonic()) < began + seconds:
        if scheduled < (now_s - began) * rate:
            atf.schedule_many([{"lambda": "demo.noop", "payload": {}}] * batch)
            scheduled += batch
        else:
            time.sleep(min(batch / rate, 0.05))
        if now_s >= next_sample:
            cutoff = timezone.now() - timedelta(seconds=retention_s)
            past_max = max(past_max, TaskEntity.objects.filter(
                status__in=list(states.FINAL), finished_at__lt=cutoff).count())
            waiting_max = max(waiting_max, TaskEntity.objects.filter(
                status__in=list(states.LIVE)).count())
            next_sample += PACE_SAMPLE_S
    # Finished over the run: every task scheduled but those still to finish (pruned ones
    # included, which the rows no longer hold).
    finished = scheduled - TaskEntity.objects.filter(status__in=list(states.LIVE)).count()
    return {"scheduled": scheduled, "finished_per_s": finished / seconds, "past_max": past_max,
            "past_per_minute": past_max / (rate * 60), "waiting_max": waiting_max}


def shards() -> dict[str, Any]:
    from django.conf import settings

    return {"shards": getattr(settings, "ATF_STORE_SHARDS", None)}


def main(argv: list[str]) -> None:
    if argv[1] == "shards":
        _django()
        sys.stdout.write(json.dumps(shards()) + "\n")
        return
    _setup()
    answer: dict[str, Any]
    if argv[1] == "pass":
        answer = passes(int(argv[2]), int(argv[3]))
    elif argv[1] == "reads":
        answer = reads(int(argv[2]))
    elif argv[1] == "rollup":
        answer = rollup()
    elif argv[1] == "prune":
        answer = prune(int(argv[2]), float(argv[3]))
    elif argv[1] == "queue":
        answer = queue(float(argv[2]))
    elif argv[1] == "schedule":
        answer = schedule_ratio(int(argv[2]), int(argv[3]))
    elif argv[1] == "pace":
        answer = pace(float(argv[2]), float(argv[3]), float(argv[4]))
    else:
        answer = explain()
    sys.stdout.write(json.dumps(answer) + "\n")


if __name__ == "__main__":
    main(sys.argv)
