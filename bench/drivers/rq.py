"""RQ with its defaults: a forked work horse per job; `enqueue_many` as the bulk API."""

from __future__ import annotations

from bench.drivers.base import Command, Env, peer_bin, peer_records

NAME = "rq"
LABEL = "RQ"
OPTIONS = "defaults (fork per job, pickle); `rq worker-pool -n 2` (scheduler on)"
DURABLE = False
HAS_BULK = True
SCHEMA: tuple[str, ...] = ()
records = peer_records


def setup_commands(env: Env) -> list[Command]:
    return []


def worker_commands(env: Env) -> list[Command]:
    argv = [peer_bin("rq"), "worker-pool", "-n", "2", "-u", env.redis_url, "a", "b"]
    return [Command(role="worker", argv=argv, env=env.variables())]


class Client:
    def __init__(self) -> None:
        import os

        import redis
        from rq import Queue

        connection = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"])
        self.queues = {"noop": Queue("a", connection=connection),
                       "record": Queue("b", connection=connection)}

    def send(self, task: str, key: str, due: float, eta: float | None) -> None:
        import datetime as dt

        from bench.peers import common

        if task == "noop":
            self.queues[task].enqueue(common.noop)
        elif eta is None:
            self.queues[task].enqueue(common.record, key, due)
        else:
            when = dt.datetime.fromtimestamp(eta, tz=dt.UTC)
            self.queues[task].enqueue_at(when, common.record, key, due)

    def send_many(self, task: str, key: str, dues: list[float]) -> None:
        from rq import Queue

        from bench.peers import common

        if task == "noop":
            jobs = [Queue.prepare_data(common.noop) for _ in dues]
        else:
            jobs = [Queue.prepare_data(common.record, (key, due)) for due in dues]
        self.queues[task].enqueue_many(jobs)

    def close(self) -> None:
        pass
