"""What a name per Django priority costs (docs/lambdas.md): the consumer's pass over one lambda
and a worker's pop, with ATF's three default names and with DJANGO_PRIORITIES' 201.

    ATF_TEST_DATABASE_NAME=test_prio REDIS_URL=redis://127.0.0.1:6379/N \\
        .venv/bin/python -m bench.priority_names

It creates its own test database (dropped at the end) and uses its own queue prefix.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from datetime import timedelta

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
os.environ.setdefault("ATF_QUEUE_PREFIX", "atfprio")
django.setup()

from django.db import transaction  # noqa: E402
from django.test.utils import override_settings, setup_databases, teardown_databases  # noqa: E402
from django.utils import timezone  # noqa: E402

from tasks_core import atf, queues, store  # noqa: E402
from tasks_core.contrib.django_tasks import DJANGO_PRIORITIES  # noqa: E402
from tasks_core.gating import Decision  # noqa: E402
from tasks_core.models import Lambda  # noqa: E402
from tasks_core.queues.base import Message  # noqa: E402

LAMBDA = "demo.noop"
BACKLOG = 2000
TAKE = 500


def median_ms(action: Callable[[], object], *, runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def consumer_pass(lambda_id: int) -> None:
    """One consumer pass over the lambda, rolled back so every run sees the same rows."""
    with transaction.atomic():
        store.enqueue_due(lambda_id, limit=TAKE, now=timezone.now(), skip_collections=[],
                          decide=lambda collection: Decision.ENQUEUE)
        transaction.set_rollback(True)


def measure(names: list[str]) -> dict[str, float]:
    with override_settings(ATF_PRIORITIES=names, ATF_DEFAULT_PRIORITY="default"):
        lam = Lambda.objects.get(name=LAMBDA)
        idle = median_ms(lambda: consumer_pass(lam.pk), runs=200)
        past = timezone.now() - timedelta(minutes=1)
        with transaction.atomic():
            for n in range(BACKLOG):
                atf.schedule(LAMBDA, {"n": n}, priority=names[n % len(names)], run_at=past)
            backlog = median_ms(lambda: consumer_pass(lam.pk), runs=30)
            transaction.set_rollback(True)
        backend = queues.backend()
        keys = [backend.queue_name(LAMBDA, name) for name in names]
        empty_pop = median_ms(lambda: backend.pop(keys, max_count=16, wait_s=0), runs=300)

        def pop_one_from_the_last() -> None:
            backend.push(keys[-1], [Message(task_id=1, lease=1)])
            backend.pop(keys, max_count=16, wait_s=0)

        last_pop = median_ms(pop_one_from_the_last, runs=300)
        backend.close()
    return {"idle pass": idle, f"pass taking {TAKE} of {BACKLOG}": backlog,
            "pop, all empty": empty_pop, "push one into the last queue, pop": last_pop}


def main() -> None:
    databases = setup_databases(verbosity=0, interactive=False)
    try:
        atf.schedule(LAMBDA, {})  # the lambda's row and collection
        results = {len(names): measure(names)
                   for names in (["high", "default", "low"], DJANGO_PRIORITIES)}
    finally:
        teardown_databases(databases, verbosity=0)
    print("| median, ms | 3 names | 201 names |\n|---|---|---|")
    for label in results[3]:
        print(f"| {label} | {results[3][label]:.2f} | {results[201][label]:.2f} |")


if __name__ == "__main__":
    main()
