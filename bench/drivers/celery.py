"""Celery (Redis broker): acks_late, prefetch multiplier 1, results ignored; no bulk API."""

from __future__ import annotations

from bench.drivers.base import Command, Env, peer_bin, peer_records

NAME = "celery"
LABEL = "Celery"
OPTIONS = ("Redis broker; task_acks_late, task_reject_on_worker_lost, "
           "worker_prefetch_multiplier=1, results ignored; prefork 2 processes")
DURABLE = False
HAS_BULK = False
SCHEMA: tuple[str, ...] = ()
records = peer_records


def setup_commands(env: Env) -> list[Command]:
    return []


def worker_commands(env: Env) -> list[Command]:
    argv = [peer_bin("celery"), "-A", "bench.peers.celery_app", "worker", "-Q", "a,b", "-c", "2",
            "-P", "prefork", "--without-gossip", "--without-mingle", "--without-heartbeat",
            "-l", "WARNING"]
    return [Command(role="worker", argv=argv, env=env.variables())]


class Client:
    def __init__(self) -> None:
        from bench.peers import celery_app

        self.tasks = {"record": celery_app.record, "noop": celery_app.noop}

    def send(self, task: str, key: str, due: float, eta: float | None) -> None:
        import datetime as dt

        if task == "noop":
            self.tasks[task].apply_async(queue="a")
        elif eta is None:
            self.tasks[task].apply_async((key, due), queue="b")
        else:
            when = dt.datetime.fromtimestamp(eta, tz=dt.UTC)
            self.tasks[task].apply_async((key, due), queue="b", eta=when)

    def close(self) -> None:
        pass
