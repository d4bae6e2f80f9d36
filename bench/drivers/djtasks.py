"""django-tasks-db, the database backend of the Django tasks API, with its defaults."""

from __future__ import annotations

import os

from bench.drivers.base import PEERS_PYTHON, Command, Env, PeerClient, peer_records, utc

NAME = "djtasks"
LABEL = "django-tasks-db"
OPTIONS = "PostgreSQL, defaults (db_worker polls every 1 s); 2 db_worker processes"
DURABLE = True
HAS_BULK = False
SCHEMA = ("django_tasks_database_dbtaskresult",)
records = peer_records
_SETTINGS = "--settings=bench.peers.djtasks_settings"


def _django(env: Env, role: str, *args: str) -> Command:
    return Command(role=role, argv=[str(PEERS_PYTHON), "-m", "django", *args, _SETTINGS],
                   env=env.variables())


def setup_commands(env: Env) -> list[Command]:
    return [_django(env, "setup", "migrate", "-v", "0")]


def worker_commands(env: Env) -> list[Command]:
    return [_django(env, "worker", "db_worker", "--queue-name", "a,b", "--no-startup-delay")
            for _ in range(2)]


class Client(PeerClient):
    def __init__(self) -> None:
        import django

        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.peers.djtasks_settings")
        django.setup()
        from bench.peers import djtasks_app

        self.app = djtasks_app

    def noop(self) -> None:
        self.app.noop.enqueue()

    def now(self, key: str, due: float) -> None:
        self.app.record.enqueue(key, due)

    def later(self, key: str, due: float, eta: float) -> None:
        self.app.record.using(run_after=utc(eta)).enqueue(key, due)

    def backlog(self, task: str, key: str, dues: list[float]) -> None:
        """Insert many rows at once, as enqueue() would write them (set-up only, not timed)."""
        from django_tasks_db.models import DBTaskResult, get_date_max

        target = self.app.noop if task == "noop" else self.app.record
        rows = [
            DBTaskResult(
                id=DBTaskResult._meta.pk.default(),
                args_kwargs={"args": [] if task == "noop" else [key, due], "kwargs": {}},
                priority=target.priority, task_path=target.module_path,
                queue_name=target.queue_name, run_after=target.run_after or get_date_max(),
                backend_name="default",
            )
            for due in dues
        ]
        DBTaskResult.objects.bulk_create(rows, batch_size=1000)
