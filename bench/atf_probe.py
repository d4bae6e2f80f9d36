"""In-process probes of ATF's store: `python -m bench.atf_probe pass ROUNDS DUE` or
`python -m bench.atf_probe explain`. They run in the project's venv with the bench's ATF
settings and print one JSON line.

- `pass`: {"idle_ms", "busy_ms"}: the median time of a consumer pass with nothing due, and of
  one that enqueues DUE no-op tasks (scheduled due now before it, not timed). A pass reads the
  gates, takes the due rows, marks them enqueued and pushes them to Redis.
- `explain`: {"due": plan, "mark_enqueued": …, "claim": …, "start": …, "finish": …}: the
  `EXPLAIN (ANALYZE, BUFFERS)` of each prepared statement of the hot path as ten tasks go
  through one consumer pass, a claim, a start and a finish: each statement is explained (and
  rolled back) just before it runs for real, with the same parameters.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from typing import Any


def _setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "atf_project.settings")
    import django

    django.setup()
    from tasks_core import lambda_sync

    lambda_sync.sync_to_store()


def passes(rounds: int, due: int) -> dict[str, float]:
    from tasks_core import atf
    from workers.consumer import Consumer

    consumer = Consumer(batch_size=due, poll_interval_s=1.0)
    consumer.run_pass()  # connections opened and statements prepared before the clock starts
    idle, busy = [], []
    for _ in range(rounds):
        started = time.perf_counter()
        consumer.run_pass()
        idle.append(time.perf_counter() - started)
        atf.schedule_many([{"lambda": "demo.noop", "payload": {}}] * due)
        started = time.perf_counter()
        summary = consumer.run_pass()
        busy.append(time.perf_counter() - started)
        if summary.enqueued != due:
            raise SystemExit(f"a pass enqueued {summary.enqueued} of {due} due tasks")
    return {"idle_ms": statistics.median(idle) * 1000, "busy_ms": statistics.median(busy) * 1000}


class _Explainer:
    """While active, each prepared statement the store runs is first run under
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
            if options.get("prepare"):
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
            raise SystemExit(f"the store ran no prepared statement for {name}")
        return self.plans.pop(0)


def explain() -> dict[str, str]:
    from django.utils import timezone

    from tasks_core import atf, directory, store
    from tasks_core.models import TaskEntity
    from tasks_core.queues.base import Message
    from tasks_core.store.values import Outcome, Result
    from workers.consumer import Consumer

    consumer = Consumer(batch_size=10, poll_interval_s=1.0)
    ids = [task.pk for task in atf.schedule_many([{"lambda": "demo.noop", "payload": {}}] * 10)]
    plans: dict[str, str] = {}
    with _Explainer() as explainer:
        consumer.run_pass()
        plans["due"], plans["mark_enqueued"] = explainer.take("due"), explainer.take("mark")
        messages = [Message(task_id=pk, lease=lease) for pk, lease in
                    TaskEntity.objects.filter(pk__in=ids).values_list("pk", "lease")]
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


def main(argv: list[str]) -> None:
    _setup()
    if argv[1] == "pass":
        answer: dict[str, Any] = passes(int(argv[2]), int(argv[3]))
    else:
        answer = explain()
    sys.stdout.write(json.dumps(answer) + "\n")


if __name__ == "__main__":
    main(sys.argv)
