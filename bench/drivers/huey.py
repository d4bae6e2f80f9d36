"""Huey on Redis with results off; one queue for every task; no bulk API."""

from __future__ import annotations

import time

from bench.drivers.base import Command, Env, PeerClient, no_setup, peer_bin, peer_records

NAME = "huey"
LABEL = "Huey"
OPTIONS = "RedisHuey, results off, one queue; consumer -k thread -w 8 (defaults otherwise)"
DURABLE = False
HAS_BULK = False
SCHEMA: tuple[str, ...] = ()
records = peer_records
setup_commands = no_setup


def worker_commands(env: Env) -> list[Command]:
    argv = [peer_bin("huey_consumer"), "bench.peers.huey_app.huey", "-k", "thread", "-w", "8", "-q"]
    return [Command(role="worker", argv=argv, env=env.variables())]


class Client(PeerClient):
    def __init__(self) -> None:
        from bench.peers import huey_app

        self.app = huey_app

    def noop(self) -> None:
        self.app.noop()

    def now(self, key: str, due: float) -> None:
        self.app.record(key, due)

    def later(self, key: str, due: float, eta: float) -> None:
        self.app.record.schedule(args=(key, due), delay=max(0.0, eta - time.time()))
