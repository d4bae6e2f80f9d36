"""Dramatiq with its Redis broker and default middleware; no bulk API."""

from __future__ import annotations

import time

from bench.drivers.base import Command, Env, PeerClient, no_setup, peer_bin, peer_records

NAME = "dramatiq"
LABEL = "Dramatiq"
OPTIONS = "Redis broker defaults (ack after the task, Retries middleware); 2 processes x 8 threads"
DURABLE = False
HAS_BULK = False
SCHEMA: tuple[str, ...] = ()
records = peer_records
setup_commands = no_setup


def worker_commands(env: Env) -> list[Command]:
    argv = [peer_bin("dramatiq"), "bench.peers.dramatiq_app", "--processes", "2", "--threads", "8"]
    return [Command(role="worker", argv=argv, env=env.variables())]


class Client(PeerClient):
    def __init__(self) -> None:
        from bench.peers import dramatiq_app

        self.app = dramatiq_app

    def noop(self) -> None:
        self.app.noop.send()

    def now(self, key: str, due: float) -> None:
        self.app.record.send(key, due)

    def later(self, key: str, due: float, eta: float) -> None:
        delay_ms = max(0, int((eta - time.time()) * 1000))
        self.app.record.send_with_options(args=(key, due), delay=delay_ms)
