"""Wake-ups: a committed schedule of a task due now tells the consumers at once (Redis pub/sub).

The message is sent by a thread of its own, so that schedule() never waits for Redis, and the
wake-ups asked for while one is on its way, or within PAUSE_S after it, become one: a process
scheduling a stream of tasks publishes at most one a pause, not one a task (a publish cost the
process half as much CPU again as the rest of a `schedule()`, and woke every consumer loop of
the shard). A wake-up asked for during the pause is sent when it ends, so a task waits at most
PAUSE_S longer. Polling stays the safety net: a wake-up that cannot be sent (Redis down, the
process ending) only costs latency.
"""

from __future__ import annotations

import logging
import os
import threading
import time

import redis

from tasks_core import conf, shards
from tasks_core.conf import atf_settings

logger = logging.getLogger(__name__)

#: Seconds the sender waits after a publish before the next one.
PAUSE_S = 0.005

_client_lock = threading.Lock()
_client: redis.Redis | None = None


def channel(shard: str | None = None) -> str:
    """The channel of a shard's wake-ups (default: the shard the store works on); slot 0's
    is the one of a store without shards."""
    alias = shard or shards.current()
    base = f"{atf_settings.queue_prefix}:wakeup"
    return base if alias == shards.aliases()[0] else f"{base}:{alias}"


def client() -> redis.Redis:
    """This process's client of ATF's Redis (short timeouts: a caller must not wait on it)."""
    global _client
    with _client_lock:
        if _client is None:
            _client = redis.Redis.from_url(conf.redis_url(), socket_connect_timeout=1,
                                           socket_timeout=1)
        return _client


def _publish(name: str) -> None:
    try:
        client().publish(name, b"1")
    except redis.RedisError as exc:
        logger.debug("wake-up not sent (the consumer's poll will find the task): %s", exc)


class _Sender:
    """The thread that publishes wake-ups: one publish for all asked before it starts, and at
    most one a PAUSE_S."""

    def __init__(self) -> None:
        self.wanted = threading.Event()
        self.lock = threading.Lock()
        self.pid = 0  #: the process whose thread runs (a forked child starts its own)
        self.channels: set[str] = set()  #: those asked for since the last publish

    def ask(self, name: str) -> None:
        if self.pid != os.getpid():
            with self.lock:
                if self.pid != os.getpid():
                    self.wanted = threading.Event()
                    threading.Thread(target=self._run, args=(self.wanted,),
                                     name="WakeupSender", daemon=True).start()
                    self.pid = os.getpid()
        if name not in self.channels:
            with self.lock:
                self.channels.add(name)
        self.wanted.set()

    def _run(self, wanted: threading.Event) -> None:
        while True:
            wanted.wait()
            wanted.clear()  # before publishing: a wake-up asked from here on gets a publish too
            with self.lock:
                names, self.channels = self.channels, set()
            for name in names:
                _publish(name)
            time.sleep(PAUSE_S)


_sender = _Sender()


def notify() -> None:
    """Tell the consumers of the shard the store works on that a task is due now (returns at
    once; the message follows)."""
    _sender.ask(channel())


class Listener(threading.Thread):
    """Sets `event` whenever a wake-up arrives; reconnects by itself."""

    def __init__(self, event: threading.Event, shard: str | None = None) -> None:
        super().__init__(name="WakeupListener", daemon=True)
        self.event = event
        self.channel = channel(shard)
        self.running = True

    def run(self) -> None:
        while self.running:
            try:
                client = redis.Redis.from_url(conf.redis_url(), socket_connect_timeout=2,
                                              health_check_interval=10)
                pubsub = client.pubsub(ignore_subscribe_messages=True)
                pubsub.subscribe(self.channel)
                while self.running:
                    if pubsub.get_message(timeout=1.0) is not None:
                        self.event.set()
            except redis.RedisError as exc:
                logger.debug("wake-up listener lost redis: %s", exc)
                self.event.wait(atf_settings.restart_delay_s)

    def stop(self) -> None:
        self.running = False
