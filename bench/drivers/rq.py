"""RQ with its defaults: a forked work horse per job; `enqueue_many` as the bulk API."""

from __future__ import annotations

import os

from bench.drivers.base import Command, Env, PeerClient, no_setup, peer_bin, peer_records, utc

NAME = "rq"
LABEL = "RQ"
OPTIONS = "defaults (fork per job, pickle); `rq worker-pool -n 2` (scheduler on)"
DURABLE = False
HAS_BULK = True
SCHEMA: tuple[str, ...] = ()
records = peer_records
setup_commands = no_setup


def worker_commands(env: Env) -> list[Command]:
    argv = [peer_bin("rq"), "worker-pool", "-n", "2", "-u", env.redis_url, "a", "b"]
    return [Command(role="worker", argv=argv, env=env.variables())]


class Client(PeerClient):
    def __init__(self) -> None:
        import redis
        from rq import Queue

        from bench.peers import common

        connection = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"])
        self.a, self.b = Queue("a", connection=connection), Queue("b", connection=connection)
        self.common = common

    def noop(self) -> None:
        self.a.enqueue(self.common.noop)

    def now(self, key: str, due: float) -> None:
        self.b.enqueue(self.common.record, key, due)

    def later(self, key: str, due: float, eta: float) -> None:
        self.b.enqueue_at(utc(eta), self.common.record, key, due)

    def send_many(self, task: str, key: str, dues: list[float]) -> None:
        from rq import Queue

        if task == "noop":
            self.a.enqueue_many([Queue.prepare_data(self.common.noop) for _ in dues])
        else:
            self.b.enqueue_many([Queue.prepare_data(self.common.record, (key, due))
                                 for due in dues])
