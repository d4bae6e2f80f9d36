"""The links the shard faults act on: a proxy that resets its connections (`drop`), and a
worker's shard URLs rewritten through proxies of its own; and the faults that need shards."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from tests.chaos.cli import parse
from tests.chaos.cluster import Proxies
from tests.proxy import Proxy


@pytest.fixture
def echo() -> Iterator[int]:
    """A TCP server on loopback that sends back what it reads; its port."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(1024):
                conn.sendall(data)

    def accept() -> None:
        while True:
            try:
                conn, _address = server.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield server.getsockname()[1]
    server.close()


def talk(port: int) -> bytes:
    """Send b"ping" through a new connection to `port`; what comes back (b"" where the
    connection ended first, by an orderly close or a reset)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
            conn.sendall(b"ping")
            return conn.recv(1024)
    except ConnectionError:
        return b""


def test_drop_ends_the_open_connections_and_each_new_one_until_restored(echo: int) -> None:
    proxy = Proxy("127.0.0.1", echo)
    try:
        held = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        held.sendall(b"hello")
        assert held.recv(1024) == b"hello"
        # When the proxy drops: the open connection ends at once, and so does a new one
        assert proxy.drop() == 1
        assert held.recv(1024) == b""
        held.close()
        assert talk(proxy.port) == b""
        # And once restored, new connections flow again
        proxy.restore()
        assert talk(proxy.port) == b"ping"
    finally:
        proxy.close()


def test_a_workers_shard_urls_go_through_its_proxies_host_for_host() -> None:
    proxies = Proxies([("127.0.0.1", 5433), ("127.0.0.1", 5434)])
    try:
        url = ("postgres://postgres@127.0.0.1:5433,127.0.0.1:5434/atf"
               "?target_session_attrs=read-write")
        first, second = (proxy.port for proxy in proxies.each)
        assert proxies.through(url) == (f"postgres://postgres@127.0.0.1:{first},127.0.0.1:"
                                        f"{second}/atf?target_session_attrs=read-write")
    finally:
        proxies.close()


def test_the_shard_faults_come_with_shards_only(capsys: pytest.CaptureFixture[str]) -> None:
    assert not [name for name in parse(["short"]).faults if name.startswith("shard-")]
    assert {"shard-kill", "shard-failover", "shard-cut"} <= set(
        parse(["short", "--shards", "3"]).faults)
    with pytest.raises(SystemExit):
        parse(["short", "--faults", "shard-cut"])
    assert "shard-cut needs shards: add --shards 3" in capsys.readouterr().err
