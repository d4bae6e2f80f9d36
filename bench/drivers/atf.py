"""ATF for Django: PostgreSQL task store (every transition persisted) and Redis queues."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

from bench.drivers.base import ATF_PYTHON, ROOT, Command, Env

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    import redis

NAME = "atf"
LABEL = "ATF"
OPTIONS = ("PostgreSQL store, every transition persisted (synchronous commits); Redis queues; "
           "consumer + runworker --threads 64 (one process: its executors wait on the store, "
           "not the CPU, so threads fill its batches; a second process would double the memory)")
DURABLE = True
HAS_BULK = True
SCHEMA = ("tasks_core_taskentity", "tasks_core_taskassoc", "tasks_core_taskattempt",
          "tasks_core_taskdependency")
MANAGE = str(ROOT / "manage.py")
#: The team that owns the demo lambdas; the REST benchmark's token belongs to it.
TEAM = "demo"
#: demo.record writes only to keys that start with this.
RECORD_PREFIX = "demo:"


def _database_url(dsn: str) -> str:
    return dsn.replace("postgresql://", "postgres://")


def variables(env: Env) -> dict[str, str]:
    """Our settings pointed at the bench's own database and Redis database (and, for a
    sharded store, at its shards: the first is DATABASE_URL itself, which keeps the control
    data)."""
    shards = ({"ATF_SHARD_URLS": ",".join(map(_database_url, env.shard_dsns))}
              if env.shard_dsns else {})
    return {**env.variables(), "DATABASE_URL": _database_url(env.pg_dsn),
            "REDIS_URL": env.redis_url, "ATF_QUEUE_PREFIX": "atfbench",
            "DJANGO_SETTINGS_MODULE": "atf_project.settings", "ATF_LOG_LEVEL": "WARNING",
            "ATF_DEMO_TEAM": TEAM, "ATF_DEMO": "1",
            # Retention off: the store-size runs keep millions of finished rows in the table.
            "ATF_RETENTION_S": "0", **shards}


def _manage(env: Env, role: str, *args: str) -> Command:
    return Command(role=role, argv=[str(ATF_PYTHON), MANAGE, *args], env=variables(env))


def _consumer(env: Env) -> Command:
    return _manage(env, "consumer", "runconsumer")


def setup_commands(env: Env) -> list[Command]:
    return [_manage(env, "setup", "migrate", "-v", "0")]


def shard_setup_command(env: Env, alias: str) -> Command:
    """Migrates the shard `alias` (a `DATABASES` key) of a sharded store."""
    return _manage(env, "setup", "migrate", "--database", alias, "-v", "0")


def shards_command(env: Env) -> Command:
    """Prints, as its last line, {"shards": [alias, ...]}: the store's shards as the settings
    of the code under test name them (null: it has no shard support)."""
    return Command(role="setup", argv=[str(ATF_PYTHON), "-m", "bench.atf_probe", "shards"],
                   env=variables(env))


def worker_commands(env: Env) -> list[Command]:
    return [_consumer(env),
            _manage(env, "worker", "runworker", "--threads", "64")]


def per_core_commands(env: Env) -> list[Command]:
    """The consumer, and a worker process per core (`runworker --processes N`), as Dramatiq
    runs a process per core: one process's Python holds one core at most (its GIL), so on a
    machine of N cores one process leaves the rest to PostgreSQL, Redis and nothing."""
    return [_consumer(env),
            _manage(env, "worker", "runworker", "--threads", "64",
                    "--processes", str(os.cpu_count() or 1))]


def one_process_commands(env: Env) -> list[Command]:
    """The consumer as a thread of the one worker process (`runworker --with-consumer`)."""
    return [_manage(env, "worker", "runworker", "--threads", "64", "--with-consumer")]


def per_lambda_commands(env: Env) -> list[Command]:
    """The isolation run's deployment: its own worker process for each lambda."""
    return [_consumer(env),
            _manage(env, "worker", "runworker", "demo.noop", "--threads", "8"),
            _manage(env, "worker", "runworker", "demo.record", "--threads", "8")]


def limit_command(env: Env, *options: str) -> Command:
    """Sets (or with "code", clears) operator options of the drain's lambda, demo.record."""
    return _manage(env, "setup", "atf_lambda", "demo.record", *options)


def token_command(env: Env) -> Command:
    """Prints an API token of the demo team as its last line."""
    return _manage(env, "setup", "atf_token", TEAM, "bench")


def api_command(env: Env, port: int) -> Command:
    """The REST API as documented for a server: the same command as `web_command`."""
    return web_command(env, port)


def worker_token_command(env: Env) -> Command:
    """Prints a worker token of the demo team as its last line."""
    return _manage(env, "setup", "atf_token", TEAM, "bench-worker", "--worker")


def web_command(env: Env, port: int) -> Command:
    """The API as deployed for remote workers: the project's gunicorn config (gthread
    processes, a database pool each)."""
    argv = [str(ATF_PYTHON.parent / "gunicorn"), "-c", "python:atf_project.gunicorn_conf",
            "-b", f"127.0.0.1:{port}", "--log-level", "warning", "--chdir", str(ROOT),
            "atf_project.wsgi:application"]
    # The bench measures what the API takes, not one team's share of it: one team sends it all.
    return Command(role="api", argv=argv,
                   env={**variables(env), "ATF_API_SCHEDULE_RATE_PER_TEAM": "0"})


def remote_worker_commands(env: Env, api_url: str, token: str, *, processes: int = 1,
                           threads: int = 64, lambdas: tuple[str, ...] = ()) -> list[Command]:
    """Worker processes that reach ATF only through the API: settings without a database."""
    variables_ = {key: value for key, value in variables(env).items() if key != "DATABASE_URL"}
    variables_.update(DJANGO_SETTINGS_MODULE="atf_project.worker_settings",
                      ATF_API_TOKEN=token)
    argv = [str(ATF_PYTHON), MANAGE, "runworker", *lambdas, "--threads", str(threads),
            "--api", api_url]
    return [Command(role="worker", argv=argv, env=variables_) for _ in range(processes)]


def direct_worker_commands(env: Env, *, processes: int, threads: int,
                           lambdas: tuple[str, ...] = ()) -> list[Command]:
    """Worker processes that reach the store and queues themselves."""
    return [_manage(env, "worker", "runworker", *lambdas, "--threads", str(threads))
            for _ in range(processes)]


def record_key(key: str) -> str:
    """The Redis list demo.record appends the tasks of `key` to."""
    return f"{RECORD_PREFIX}{key}"


def records(client: redis.Redis, key: str) -> list[tuple[float, float, float]]:
    """demo.record lines joined with the due times the producer stored in `<key>:due`."""
    return [(due, start, end) for _task_id, due, start, end in task_records(client, key)]


def task_records(client: redis.Redis, key: str) -> list[tuple[int, float, float, float]]:
    """`records` with each line's task id first."""
    dues = {int(task_id): float(due) for task_id, due in client.hgetall(f"{key}:due").items()}
    rows = []
    for line in client.lrange(record_key(key), 0, -1):
        item = json.loads(line)
        rows.append((item["task_id"], dues.get(item["task_id"], 0.0), item["start"],
                     item["end"]))
    return rows


class Client:
    """Schedules through `atf.schedule` / `atf.schedule_many` (runs in the project's venv)."""

    def __init__(self) -> None:
        import os

        import django

        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "atf_project.settings")
        django.setup()
        from tasks_core import atf

        self.atf = atf
        self.dues: dict[str, dict[int, float]] = {}

    def _call(self, task: str, key: str) -> tuple[str, dict]:
        if task == "noop":
            return "demo.noop", {}
        return "demo.record", {"key": record_key(key), "seconds": 0}

    def send(self, task: str, key: str, due: float, eta: float | None) -> None:
        import datetime as dt

        name, payload = self._call(task, key)
        options = {} if eta is None else {"run_at": dt.datetime.fromtimestamp(eta, tz=dt.UTC)}
        entity = self.atf.schedule(name, payload, **options)
        if due:
            self.dues.setdefault(key, {})[entity.pk] = due

    def send_many(self, task: str, key: str, dues: list[float], *,
                  run_at: float | None = None) -> None:
        import datetime as dt

        name, payload = self._call(task, key)
        options = {} if run_at is None else {"run_at": dt.datetime.fromtimestamp(run_at,
                                                                                 tz=dt.UTC)}
        self.atf.schedule_many([{"lambda": name, "payload": payload, **options} for _ in dues])

    def transaction(self) -> AbstractContextManager[object]:
        """One open transaction of the caller's, around every call made inside it."""
        from django.db import transaction

        return transaction.atomic()

    def close(self) -> None:
        import redis

        from tasks_core.conf import redis_url

        client = redis.Redis.from_url(redis_url())
        for key, dues in self.dues.items():
            client.hset(f"{key}:due", mapping=dues)
