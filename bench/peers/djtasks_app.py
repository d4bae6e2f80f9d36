"""django-tasks-db: the database backend of the Django tasks API, with its defaults."""

from __future__ import annotations

from django_tasks import task

from bench.peers import common


@task(queue_name="b")
def record(key: str, due: float) -> None:
    common.record(key, due)


@task(queue_name="a")
def noop() -> None:
    common.noop()
