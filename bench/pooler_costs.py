"""What running behind a transaction-mode pooler costs the store: its hot statements prepared
on the server or not, and a consumer's turn on a lambda (workers/turns.py) against the session
lock it replaced.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/atf_pooler_bench \\
        .venv/bin/python -m bench.pooler_costs [--rounds 200] [--batch 64]

The database is created and migrated if it does not exist. Each round schedules a batch of
demo.noop tasks one at a time, enqueues them (due query and mark), claims, starts and finishes
them, each step timed; the rounds alternate between the prepared and the unprepared backend so
that both see the same load. Prints the median and 90th percentile of each step, in ms.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
from collections import defaultdict
from collections.abc import Iterator
from urllib.parse import urlsplit

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "atf_project.settings")
os.environ.setdefault("ATF_DEMO", "1")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/atf_pooler_bench")


def _create_database(url: str) -> None:
    import psycopg

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    with psycopg.connect(host=parts.hostname, port=parts.port or 5432,
                         user=parts.username or "postgres", dbname="postgres",
                         autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')


@contextlib.contextmanager
def _timed(samples: list[float]) -> Iterator[None]:
    began = time.perf_counter()
    yield
    samples.append((time.perf_counter() - began) * 1000)


def store_steps(rounds: int, batch: int) -> dict[tuple[str, bool], list[float]]:
    from django.utils import timezone

    from tasks_core import atf, store
    from tasks_core.gating import Decision
    from tasks_core.models import Lambda
    from tasks_core.store import backends
    from tasks_core.store.backends.postgres import PostgresBackend

    atf.schedule("demo.noop")  # the lambda's row
    lambda_id = Lambda.objects.get(name="demo.noop").pk
    samples: dict[tuple[str, bool], list[float]] = defaultdict(list)
    result = store.Result(outcome=store.Outcome.SUCCESS, value=None)
    for number in range(rounds * 2):
        prepare = number % 2 == 0
        backends.use(PostgresBackend(prepare=prepare))
        for _ in range(batch):
            with _timed(samples["schedule one", prepare]):
                atf.schedule("demo.noop")
        now = timezone.now()
        with _timed(samples["due + mark", prepare]):
            due = store.enqueue_due(lambda_id, limit=batch, now=now, skip_collections=[],
                                    decide=lambda collection: Decision.ENQUEUE)
        messages = [message for _priority, message in due.messages]
        with _timed(samples["claim", prepare]):
            claimed = store.claim(messages, worker="bench", lambda_ids=[lambda_id], now=now)
        with _timed(samples["start", prepare]):
            store.start_many(claimed, now=now)
        with _timed(samples["finish", prepare]):
            store.finish_many([(task, result) for task in claimed], now=now)
    backends.use(None)
    return samples


def turn_steps(rounds: int) -> dict[str, list[float]]:
    from django.db import connection

    from workers import turns

    samples: dict[str, list[float]] = defaultdict(list)

    def session_turn() -> None:  # the lock workers/turns.py took before
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(%s, 1)", [turns.LOCK_NAMESPACE])
            cursor.execute("SELECT pg_advisory_unlock(%s, 1)", [turns.LOCK_NAMESPACE])

    def transaction_turn() -> None:
        with turns.lambda_turn(1):
            pass

    for _ in range(rounds * 10):
        with _timed(samples["turn: session lock + unlock"]):
            session_turn()
        with _timed(samples["turn: transaction lock, own connection"]):
            transaction_turn()
    turns.reset()
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    _create_database(os.environ["DATABASE_URL"])
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    print(f"{'step':42} {'median ms':>10} {'p90 ms':>8}")
    for (name, prepare), values in sorted(store_steps(args.rounds, args.batch).items()):
        label = f"{name} ({'prepared' if prepare else 'not prepared'})"
        print(f"{label:42} {statistics.median(values):10.3f} "
              f"{statistics.quantiles(values, n=10)[-1]:8.3f}")
    for name, values in turn_steps(args.rounds).items():
        print(f"{name:42} {statistics.median(values):10.3f} "
              f"{statistics.quantiles(values, n=10)[-1]:8.3f}")


if __name__ == "__main__":
    main()
