"""Queue servers that tests start for themselves: a 3-node Redis Cluster and a moto SQS server.

Both bind 127.0.0.1 on free ports and are stopped when their context manager exits, so runs
beside each other on one machine never share a server. Use them from session fixtures:

    with queue_servers.redis_cluster(tmp_path_factory.mktemp("cluster")) as url: ...
    with queue_servers.moto_sqs() as endpoint_url: ...
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from moto.server import ThreadedMotoServer

from tests.ports import bindable, free_port

#: Seconds a server gets to come up before the fixture fails.
START_TIMEOUT_S = 30.0

#: Dummy AWS credentials for the local SQS server; never real ones.
DUMMY_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def _cluster_port() -> int:
    # A cluster node also listens on port + 10000 (the cluster bus): both must be free.
    for _ in range(200):
        port = free_port()
        if port + 10000 <= 65535 and bindable(port + 10000):
            return port
    raise RuntimeError("no free port pair for a Redis Cluster node")


def _wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {START_TIMEOUT_S}s waiting for {what}")
        time.sleep(0.05)


def _answers(port: int) -> bool:
    client = redis.Redis(port=port, socket_connect_timeout=0.5)
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False
    finally:
        client.close()


def _cluster_ok(ports: list[int]) -> bool:
    for port in ports:
        client = redis.Redis(port=port)
        try:
            if client.cluster("info").get("cluster_state") != "ok":
                return False
        finally:
            client.close()
    return True


def _stop(children: list[subprocess.Popen]) -> None:
    for child in children:
        if child.poll() is None:
            child.terminate()
    for child in children:
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


@contextlib.contextmanager
def redis_cluster(base_dir: Path, *, nodes: int = 3) -> Iterator[str]:
    """Run a Redis Cluster of `nodes` masters; yields the URL of its first node.

    Skips the test only when redis-server is not installed; any other failure is an error.
    """
    server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if server is None or cli is None:
        pytest.skip("redis-server / redis-cli are not installed")
    ports = [_cluster_port() for _ in range(nodes)]
    children: list[subprocess.Popen] = []
    try:
        for port in ports:
            node_dir = base_dir / str(port)
            node_dir.mkdir(parents=True)
            log = open(node_dir / "redis.log", "w")  # noqa: SIM115 - closed with the process
            children.append(subprocess.Popen(
                [server, "--bind", "127.0.0.1", "--port", str(port), "--cluster-enabled", "yes",
                 "--cluster-config-file", str(node_dir / "nodes.conf"), "--dir", str(node_dir),
                 "--save", "", "--appendonly", "no", "--daemonize", "no"],
                stdout=log, stderr=subprocess.STDOUT,
            ))
        for port in ports:
            _wait_until(lambda port=port: _answers(port), f"redis-server on port {port}")
        created = subprocess.run(
            [cli, "--cluster", "create", *(f"127.0.0.1:{port}" for port in ports),
             "--cluster-replicas", "0", "--cluster-yes"],
            capture_output=True, text=True, timeout=START_TIMEOUT_S,
        )
        if created.returncode != 0:
            output = created.stdout + created.stderr
            raise RuntimeError(f"redis-cli --cluster create failed:\n{output}")
        _wait_until(lambda: _cluster_ok(ports), "cluster_state:ok on every node")
        yield f"redis://127.0.0.1:{ports[0]}/0"
    finally:
        _stop(children)


@contextlib.contextmanager
def moto_sqs() -> Iterator[str]:
    """Run moto's server mode on a free loopback port; yields its endpoint URL.

    Set DUMMY_AWS_ENV in the environment of the clients (the fixture's job).
    """
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()
