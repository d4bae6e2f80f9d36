"""What the drivers share: the environment of one run and the processes they start."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from pathlib import Path

import redis

from bench.peers import common

ROOT = Path(__file__).resolve().parents[2]
PEERS_PYTHON = ROOT / "bench" / ".venv-peers" / "bin" / "python"
ATF_PYTHON = ROOT / ".venv" / "bin" / "python"

#: Each system's Redis database number on the bench's Redis server.
REDIS_DB = {"atf": 1, "celery": 2, "rq": 3, "dramatiq": 4, "huey": 5, "procrastinate": 6,
            "djtasks": 7}


@dataclass(frozen=True, kw_only=True)
class Env:
    """Where one system keeps its state: its own Redis database and PostgreSQL database."""

    name: str
    redis_url: str
    pg_dsn: str
    #: A store sharded across several databases (ATF): their DSNs by slot, `pg_dsn` first
    #: (it keeps the control data too). Empty: the one database, `pg_dsn`.
    shard_dsns: tuple[str, ...] = ()

    def variables(self) -> dict[str, str]:
        return {"BENCH_REDIS_URL": self.redis_url, "BENCH_PG_DSN": self.pg_dsn,
                "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}


@dataclass(frozen=True, kw_only=True)
class Command:
    """A process to start; `role` is "worker" or "consumer" (memory is reported per role)."""

    role: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)


def no_setup(env: Env) -> list[Command]:
    """Set-up of a system that needs none (its Redis database is flushed anyway)."""
    return []


class PeerClient:
    """A peer's producer: send() dispatches to noop(), now() or later(); subclasses fill them."""

    def send(self, task: str, key: str, due: float, eta: float | None) -> None:
        if task == "noop":
            self.noop()
        elif eta is None:
            self.now(key, due)
        else:
            self.later(key, due, eta)

    def noop(self) -> None:
        raise NotImplementedError

    def now(self, key: str, due: float) -> None:
        raise NotImplementedError

    def later(self, key: str, due: float, eta: float) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Nothing to release unless a subclass opened something."""


def utc(timestamp: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(timestamp, tz=datetime.UTC)


def peer_bin(name: str) -> str:
    return str(PEERS_PYTHON.parent / name)


def peer_records(client: redis.Redis, key: str) -> list[tuple[float, float, float]]:
    return common.parse(client.lrange(key, 0, -1))
