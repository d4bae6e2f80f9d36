"""Calls on threads of their own, each held until the test ends it: requests in flight."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

#: The longest a held call waits for its end (a test that fails leaves none hanging).
HOLD_S = 10.0


class HeldThreads:
    """`start(name, call, *args)` runs `call` on a thread of its own; a call that reaches
    `hold(name)` stays there until `end(name)` or `end_all()`."""

    def __init__(self) -> None:
        self._release: dict[str, threading.Event] = {}
        self._threads: list[threading.Thread] = []

    def start(self, name: str, call: Callable[..., Any], *args: Any) -> None:
        self._release[name] = threading.Event()
        thread = threading.Thread(target=call, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def hold(self, name: str) -> None:
        self._release[name].wait(HOLD_S)

    def end(self, name: str) -> None:
        self._release[name].set()

    def end_all(self) -> None:
        for release in self._release.values():
            release.set()
        for thread in self._threads:
            thread.join(HOLD_S)
