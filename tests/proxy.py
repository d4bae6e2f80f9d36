"""A TCP proxy that a test can cut: a worker's link to ATF (database or API) goes through it.

`cut()` stops forwarding (both ways) and refuses nothing: bytes simply stop flowing, which is
how a network partition looks to the worker; `restore()` lets new connections through again.
`hang()` stops forwarding on the connections open now, for good, and keeps them open, while new
connections flow: a link whose established connections hang without closing (a middlebox that
lost its state, a server that stopped reading), which only a timeout and a fresh connection get
past. `drop()` closes every connection and each new one at once until `restore()`: a link that
resets (a server gone, a firewall that rejects), which the worker sees as an error at once. It
listens on loopback, or on `listen_host` (a worker host's gateway, tests/netns.py).
"""

from __future__ import annotations

import logging
import selectors
import socket
import threading

logger = logging.getLogger(__name__)


class Proxy:
    def __init__(self, target_host: str, target_port: int, *,
                 listen_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.listener = socket.create_server((listen_host, 0))
        self.port = self.listener.getsockname()[1]
        self._flowing = threading.Event()
        self._flowing.set()
        self._dropping = threading.Event()
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._hung: set[socket.socket] = set()  #: client sides of the connections hang() stopped
        threading.Thread(target=self._accept, name="ProxyAccept", daemon=True).start()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _address = self.listener.accept()
            except OSError:
                return
            if self._dropping.is_set():
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._pairs.append((client, upstream))
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, client: socket.socket, upstream: socket.socket) -> None:
        selector = selectors.DefaultSelector()
        selector.register(client, selectors.EVENT_READ, upstream)
        selector.register(upstream, selectors.EVENT_READ, client)
        try:
            while not self._stopped.is_set():
                if client in self._hung:
                    self._stopped.wait(0.1)
                    continue
                if not self._flowing.is_set():
                    self._flowing.wait(0.1)
                    continue
                for key, _events in selector.select(timeout=0.1):
                    if not self._flowing.is_set() or client in self._hung:
                        break
                    data = key.fileobj.recv(65536)
                    if not data:
                        return
                    key.data.sendall(data)
        except OSError:
            return
        finally:
            selector.close()
            client.close()
            upstream.close()

    def cut(self) -> None:
        """Stop forwarding bytes on every connection, as a partition would."""
        self._flowing.clear()

    def hang(self) -> int:
        """Stop forwarding on every connection open now, for good, without closing any; new
        connections flow. How many connections now hang."""
        with self._lock:
            open_now = {client for client, _upstream in self._pairs if client.fileno() != -1}
            self._hung |= open_now
            return len(open_now)

    def drop(self) -> int:
        """Close every connection open now (both sides see it end) and each new one at once,
        until `restore()`; how many were open."""
        self._dropping.set()
        with self._lock:
            open_now = [(client, upstream) for client, upstream in self._pairs
                        if client.fileno() != -1]
        for pair in open_now:
            for sock in pair:  # the pump sees the end and closes them
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    logger.debug("shutting down a proxied socket failed", exc_info=True)
        return len(open_now)

    def restore(self) -> None:
        self._dropping.clear()
        self._flowing.set()

    def close(self) -> None:
        self._stopped.set()
        self._flowing.set()
        self.listener.close()
        with self._lock:
            for client, upstream in self._pairs:
                for sock in (client, upstream):
                    try:
                        sock.close()
                    except OSError:
                        logger.debug("closing a proxied socket failed", exc_info=True)
