"""Celery (Redis broker): acks_late, prefetch multiplier 1, results ignored; no bulk API."""

from __future__ import annotations

from bench.drivers.base import Command, Env, PeerClient, no_setup, peer_bin, peer_records, utc

NAME = "celery"
LABEL = "Celery"
OPTIONS = ("Redis broker; task_acks_late, task_reject_on_worker_lost, "
           "worker_prefetch_multiplier=1, results ignored; prefork 2 processes")
DURABLE = False
HAS_BULK = False
SCHEMA: tuple[str, ...] = ()
records = peer_records
setup_commands = no_setup


def worker_commands(env: Env) -> list[Command]:
    argv = [peer_bin("celery"), "-A", "bench.peers.celery_app", "worker", "-Q", "a,b", "-c", "2",
            "-P", "prefork", "--without-gossip", "--without-mingle", "--without-heartbeat",
            "-l", "WARNING"]
    return [Command(role="worker", argv=argv, env=env.variables())]


class Client(PeerClient):
    def __init__(self) -> None:
        from bench.peers import celery_app

        self.app = celery_app

    def noop(self) -> None:
        self.app.noop.apply_async(queue="a")

    def now(self, key: str, due: float) -> None:
        self.app.record.apply_async((key, due), queue="b")

    def later(self, key: str, due: float, eta: float) -> None:
        self.app.record.apply_async((key, due), queue="b", eta=utc(eta))
