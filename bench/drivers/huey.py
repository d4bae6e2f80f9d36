"""Huey on Redis with results off; one queue for every task; no bulk API."""

from __future__ import annotations

from bench.drivers.base import Command, Env, peer_bin, peer_records

NAME = "huey"
LABEL = "Huey"
OPTIONS = "RedisHuey, results off, one queue; consumer -k thread -w 8 (defaults otherwise)"
DURABLE = False
HAS_BULK = False
SCHEMA: tuple[str, ...] = ()
records = peer_records


def setup_commands(env: Env) -> list[Command]:
    return []


def worker_commands(env: Env) -> list[Command]:
    argv = [peer_bin("huey_consumer"), "bench.peers.huey_app.huey", "-k", "thread", "-w", "8", "-q"]
    return [Command(role="worker", argv=argv, env=env.variables())]


class Client:
    def __init__(self) -> None:
        from bench.peers import huey_app

        self.tasks = {"record": huey_app.record, "noop": huey_app.noop}

    def send(self, task: str, key: str, due: float, eta: float | None) -> None:
        import time

        if task == "noop":
            self.tasks[task]()
        elif eta is None:
            self.tasks[task](key, due)
        else:
            self.tasks[task].schedule(args=(key, due), delay=max(0.0, eta - time.time()))

    def close(self) -> None:
        pass
