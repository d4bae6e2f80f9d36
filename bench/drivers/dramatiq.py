"""Dramatiq with its Redis broker and default middleware; no bulk API."""

from __future__ import annotations

from bench.drivers.base import Command, Env, peer_bin, peer_records

NAME = "dramatiq"
LABEL = "Dramatiq"
OPTIONS = "Redis broker defaults (ack after the task, Retries middleware); 2 processes x 8 threads"
DURABLE = False
HAS_BULK = False
SCHEMA: tuple[str, ...] = ()
records = peer_records


def setup_commands(env: Env) -> list[Command]:
    return []


def worker_commands(env: Env) -> list[Command]:
    argv = [peer_bin("dramatiq"), "bench.peers.dramatiq_app", "--processes", "2", "--threads", "8"]
    return [Command(role="worker", argv=argv, env=env.variables())]


class Client:
    def __init__(self) -> None:
        from bench.peers import dramatiq_app

        self.actors = {"record": dramatiq_app.record, "noop": dramatiq_app.noop}

    def send(self, task: str, key: str, due: float, eta: float | None) -> None:
        import time

        if task == "noop":
            self.actors[task].send()
        elif eta is None:
            self.actors[task].send(key, due)
        else:
            delay_ms = max(0, int((eta - time.time()) * 1000))
            self.actors[task].send_with_options(args=(key, due), delay=delay_ms)

    def close(self) -> None:
        pass
