"""procrastinate on PostgreSQL with its defaults; `batch_defer` as the bulk API."""

from __future__ import annotations

from bench.drivers.base import Command, Env, PeerClient, peer_bin, peer_records, utc

NAME = "procrastinate"
LABEL = "procrastinate"
OPTIONS = "PostgreSQL, defaults (LISTEN/NOTIFY, polling 5 s); 2 worker processes x concurrency 8"
DURABLE = True
HAS_BULK = True
SETUP_ONCE = True
SCHEMA = ("procrastinate_jobs", "procrastinate_events", "procrastinate_periodic_defers")
records = peer_records
_APP = "--app=bench.peers.procrastinate_app.app"


def setup_commands(env: Env) -> list[Command]:
    return [Command(role="setup", argv=[peer_bin("procrastinate"), _APP, "schema", "--apply"],
                    env=env.variables())]


def worker_commands(env: Env) -> list[Command]:
    argv = [peer_bin("procrastinate"), _APP, "worker", "--concurrency", "8"]
    return [Command(role="worker", argv=argv, env=env.variables()) for _ in range(2)]


class Client(PeerClient):
    def __init__(self) -> None:
        from bench.peers import procrastinate_app

        self.app = procrastinate_app
        self.app.app.open()

    def noop(self) -> None:
        self.app.noop.defer()

    def now(self, key: str, due: float) -> None:
        self.app.record.defer(key=key, due=due)

    def later(self, key: str, due: float, eta: float) -> None:
        self.app.record.configure(schedule_at=utc(eta)).defer(key=key, due=due)

    def send_many(self, task: str, key: str, dues: list[float]) -> None:
        if task == "noop":
            self.app.noop.batch_defer(*({} for _ in dues))
        else:
            self.app.record.batch_defer(*({"key": key, "due": due} for due in dues))

    def close(self) -> None:
        self.app.app.close()
