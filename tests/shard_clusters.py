"""Private PostgreSQL 15 clusters, one per shard of a sharded task store, on private ports.

Each cluster lives in a temporary directory, runs as the `postgres` user when we are root
(initdb refuses root), listens on 127.0.0.1 only, and is stopped and removed by the fixture
that made it (tests.replication's nodes, without a standby). The shared server on 5432 is never
touched. `load_schema` gives each cluster's database the test database's tables (pg_dump
--schema-only | psql: a second, where `migrate` takes ten).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence

from tests.ports import free_port
from tests.replication import CONFIG, Node, _run, _runs_as, installed, private_home


class Clusters:
    """`count` single-node clusters, started."""

    def __init__(self, count: int) -> None:
        self.home, sockets = private_home("atf-shards-")
        self.nodes = [Node(self.home / f"shard{slot}", free_port(), sockets)
                      for slot in range(count)]
        try:
            for node in self.nodes:
                _run("initdb", "-D", str(node.directory), "-U", "postgres", "--auth=trust",
                     "-E", "UTF8", "--no-sync", "--no-instructions")
                with open(node.directory / "postgresql.conf", "a") as conf:
                    conf.write(CONFIG.format(sockets=sockets))
                node.start()
        except BaseException:
            self.stop()
            raise

    def url(self, slot: int, dbname: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.nodes[slot].port}/{dbname}"

    def load_schema(self, dbname: str, *, host: str, port: int, source: str) -> None:
        """Database `dbname` on every cluster, with the tables (no rows) of `source` at
        host:port."""
        copy_schema(self.nodes, dbname, host=host, port=port, source=source)

    def stop(self) -> None:
        for node in self.nodes:
            if (node.directory / "postmaster.pid").exists():
                subprocess.run([str(installed() / "pg_ctl"), "-D", str(node.directory), "-m",
                                "immediate", "stop"], capture_output=True, check=False,
                               timeout=60, **_runs_as())
        shutil.rmtree(self.home, ignore_errors=True)


def copy_schema(nodes: Sequence[Node], dbname: str, *, host: str, port: int,
                source: str) -> None:
    """Database `dbname` on every one of `nodes` (primaries), with the tables (no rows) of
    `source` at host:port."""
    dumped = subprocess.run([str(installed() / "pg_dump"), "--schema-only", "--no-owner",
                             "-h", host, "-p", str(port), "-U", "postgres", "-d", source],
                            capture_output=True, text=True, timeout=120, check=True).stdout
    for node in nodes:
        node.query(f'CREATE DATABASE "{dbname}"')
        subprocess.run([str(installed() / "psql"), "-q", "-v", "ON_ERROR_STOP=1", "-h",
                        "127.0.0.1", "-p", str(node.port), "-U", "postgres", "-d", dbname],
                       input=dumped, capture_output=True, text=True, timeout=120, check=True)
