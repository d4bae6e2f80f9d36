"""A TCP proxy on loopback that a test can cut: a worker's database connection goes through it.

`cut()` stops forwarding (both ways) and refuses nothing: bytes simply stop flowing, which is
how a network partition looks to the worker; `restore()` lets new connections through again.
"""

from __future__ import annotations

import logging
import selectors
import socket
import threading

logger = logging.getLogger(__name__)


class Proxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._flowing = threading.Event()
        self._flowing.set()
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        threading.Thread(target=self._accept, name="ProxyAccept", daemon=True).start()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _address = self.listener.accept()
            except OSError:
                return
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
                if not self._flowing.is_set():
                    self._flowing.wait(0.1)
                    continue
                for key, _events in selector.select(timeout=0.1):
                    if not self._flowing.is_set():
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

    def restore(self) -> None:
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
