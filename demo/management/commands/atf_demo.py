"""`manage.py atf_demo`: the whole system on one machine, fed with demo tasks, until Ctrl-C.

Prepares the store (migrations, static files, a superuser and an API token), starts gunicorn
(API and console), the store consumer and a worker as child processes, restarts a child that
dies, schedules a mix of demo tasks every few seconds, and stops everything on SIGINT, SIGTERM
or SIGHUP (a closed terminal).
"""

from __future__ import annotations

import contextlib
import io
import ipaddress
import logging
import os
import random
import re
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command, get_commands
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError

from tasks_core import atf, lambda_sync
from tasks_core.conf import atf_settings
from tasks_core.exceptions import AtfError
from workers import checks

logger = logging.getLogger(__name__)

#: A child that dies this many times within RESTART_WINDOW_S is given up on, and so is the demo.
MAX_RESTARTS = 5
RESTART_WINDOW_S = 60.0
#: Longest wait for the web server to accept connections at start.
HTTP_START_TIMEOUT_S = 30.0
#: A child's output line that starts a log record (ours, or gunicorn's "[date]").
NEW_RECORD = re.compile(r"^(\d{4}-\d\d-\d\d[ T]|\[\d{4}-)")


def demo_calls(tick: int, rng: random.Random) -> list[dict[str, Any]]:
    """The tasks scheduled at the `tick`-th round: quick ones at every priority, sleeps, delayed
    tasks, and failures that succeed after retries, fail for good, or end in the dead letters."""
    high, low = atf_settings.priorities[0], atf_settings.priorities[-1]
    calls: list[dict[str, Any]] = [
        {"lambda": "demo.noop", "collection": "web",
         "priority": rng.choice(atf_settings.priorities)},
        {"lambda": "demo.noop", "collection": "web", "priority": high},
        {"lambda": "demo.sleep", "payload": {"seconds": round(rng.uniform(0.2, 2.0), 2)},
         "collection": "reports", "priority": low},
        {"lambda": "demo.noop", "collection": "reminders", "delay": rng.randint(10, 40)},
    ]
    if tick % 2 == 0:  # fails twice, then succeeds
        calls.append({"lambda": "demo.fail", "payload": {"mode": "retriable", "times": 2},
                      "collection": "flaky"})
    if tick % 3 == 0:
        calls.append({"lambda": "demo.fail", "payload": {"mode": "fatal"},
                      "collection": "broken"})
    if tick % 4 == 0:  # runs out of attempts: dead-letter queue
        calls.append({"lambda": "demo.fail", "payload": {"mode": "retriable", "times": 99},
                      "collection": "doomed", "max_attempts": 3})
    if tick % 5 == 0:
        calls.append({"lambda": "demo.sleep", "payload": {"seconds": 1.0},
                      "collection": "urgent", "priority": high})
    return calls


@dataclass(kw_only=True)
class Child:
    """One child process of the demo; its output goes to ours, each line under its name."""

    name: str
    argv: list[str]
    tracebacks: bool = False
    process: subprocess.Popen[str] | None = None
    deaths: deque[float] = field(default_factory=lambda: deque(maxlen=MAX_RESTARTS))
    last_lines: deque[str] = field(default_factory=lambda: deque(maxlen=15))

    def start(self, write: Callable[[str], None]) -> None:
        # A session of its own: Ctrl-C in the terminal reaches only us, and we stop the children
        # with one SIGTERM each (a second signal would make a worker skip its grace period).
        self.last_lines.clear()
        self.process = subprocess.Popen(
            self.argv, cwd=settings.BASE_DIR, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, bufsize=1, start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        threading.Thread(target=self._relay, args=(self.process.stdout, write),
                         name=f"{self.name}-output", daemon=True).start()
        logger.info("started %s (pid %d): %s", self.name, self.process.pid, " ".join(self.argv))

    def _relay(self, stream: IO[str], write: Callable[[str], None]) -> None:
        in_traceback = False
        for line in stream:
            line = line.rstrip()
            self.last_lines.append(line)
            # The demo fails tasks on purpose: their log line says why, the trace adds nothing.
            if line.startswith("Traceback (most recent call last):"):
                in_traceback = not self.tracebacks
            elif NEW_RECORD.match(line):
                in_traceback = False
            if not in_traceback and line:
                write(f"{self.name:>9} | {line}")

    def exit_code(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def kill_group(self) -> None:
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)


class Command(BaseCommand):
    help = ("Run the whole system (API and console, store consumer, worker) with demo traffic "
            "until Ctrl-C.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1",
                            help="address the web server binds (default %(default)s)")
        parser.add_argument("--port", type=int, default=8000,
                            help="port of the API and console (default %(default)s)")
        parser.add_argument("--threads", type=int, default=4,
                            help="executor threads of the worker (default %(default)s)")
        parser.add_argument("--interval", type=float, default=3.0, metavar="SECONDS",
                            help="seconds between two rounds of demo tasks; 0 schedules none "
                                 "(default %(default)s)")
        parser.add_argument("--tracebacks", action="store_true",
                            help="show the tracebacks of failed tasks in the children's output")
        parser.add_argument("--username", default="admin",
                            help="the demo superuser (default %(default)s)")
        parser.add_argument("--password", default=None,
                            help="its password (default: admin on a loopback address, else a "
                                 "generated one; printed either way)")

    def handle(self, *args: Any, **options: Any) -> None:
        self.output_lock = threading.Lock()
        self.stopping = threading.Event()
        self.signals = 0
        host, port = options["host"], options["port"]
        if _port_taken(host, port):
            raise CommandError(f"port {port} on {host} is in use: pass --port (make demo "
                               "ATF_DEMO_PORT=8001)")
        password = options["password"] or _default_password(host)
        token = self._prepare(options["username"], password)
        children = self._children(host, port, options["threads"], options["tracebacks"])
        previous = {sig: signal.signal(sig, self._on_signal)
                    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        try:
            for child in children:
                child.start(self._write)
            if not self._wait_for_http(host, port, children[0]):
                return
            self._banner(host, port, options["username"], password, token, options["interval"])
            self._supervise(children, options["interval"])
        finally:
            self._stop(children)
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    # --- start ---------------------------------------------------------------------------

    def _prepare(self, username: str, password: str) -> str | None:
        """Migrate, collect static files, sync lambdas, make the superuser; return its token."""
        logger.info("database: %s", settings.DATABASES["default"]["NAME"])
        checks.require_store_and_queue().close()  # one clear line now, not crash-looping children
        call_command("migrate", interactive=False, verbosity=0)
        call_command("collectstatic", interactive=False, verbosity=0)
        lambda_sync.sync_to_store()
        user, _created = get_user_model().objects.get_or_create(
            username=username, defaults={"email": f"{username}@example.com"})
        user.is_staff = user.is_superuser = True
        user.set_password(password)
        user.save()
        if "atf_token" not in get_commands():
            logger.warning("no atf_token command yet: the demo runs without an API token")
            return None
        out = io.StringIO()
        call_command("atf_token", settings.ATF_DEMO_TEAM, username, stdout=out)
        lines = out.getvalue().strip().splitlines()
        return lines[-1].strip() if lines else None

    def _children(self, host: str, port: int, threads: int, tracebacks: bool) -> list[Child]:
        manage = [sys.executable, str(settings.BASE_DIR / "manage.py")]
        bind = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        children = [Child(name="web", tracebacks=tracebacks, argv=[
            sys.executable, "-m", "gunicorn", "-c", "python:atf_project.gunicorn_conf",
            "atf_project.wsgi:application", "--bind", bind, "--graceful-timeout", "5",
            "--log-level", "info"])]
        commands = get_commands()
        for name, argv in (("consumer", ["runconsumer"]),
                           ("worker", ["runworker", "--threads", str(threads)])):
            if argv[0] in commands:
                children.append(Child(name=name, argv=[*manage, *argv], tracebacks=tracebacks))
            else:
                logger.warning("no %s command yet: the demo runs without a %s", argv[0], name)
        return children

    def _wait_for_http(self, host: str, port: int, web: Child) -> bool:
        """Wait until the web server listens; False if we were asked to stop meanwhile."""
        deadline = time.monotonic() + HTTP_START_TIMEOUT_S
        while not _port_taken(host, port):
            if self.stopping.is_set():
                return False
            if web.exit_code() is not None:
                raise CommandError(f"the web server exited with {web.exit_code()}:\n"
                                   + "\n".join(web.last_lines))
            if time.monotonic() > deadline:
                raise CommandError(f"the web server did not listen on {host}:{port} in "
                                   f"{HTTP_START_TIMEOUT_S:.0f}s")
            time.sleep(0.1)
        return True

    def _banner(self, host: str, port: int, username: str, password: str, token: str | None,
                interval_s: float) -> None:
        shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
        base = f"http://[{shown}]:{port}" if ":" in shown else f"http://{shown}:{port}"
        key = token or "<no token: the atf_token command is missing>"
        traffic = (f"every {interval_s:g}s: demo.noop, demo.sleep, delayed tasks, high and low "
                   "priorities, demo.fail (retried, fatal, dead-lettered)"
                   if interval_s > 0 else "none (--interval 0)")
        curl = (f"curl -s -H 'Authorization: Token {key}' -H 'Content-Type: application/json' "
                f"-d '{{\"lambda\": \"demo.sleep\", \"payload\": {{\"seconds\": 1}}}}' "
                f"{base}/api/v1/tasks/")
        self._write("\n".join([
            "",
            "ATF for Django demo is running",
            f"  console     {base}/admin/",
            f"  login       {username} / {password}",
            f"  API         {base}/api/v1/   (docs {base}/api/docs/)",
            f"  API token   {key}",
            f"  try         {curl}",
            f"  demo tasks  {traffic}",
            "Stop with Ctrl-C.",
            "",
        ]), style=self.style.SUCCESS)

    # --- run -----------------------------------------------------------------------------

    def _supervise(self, children: list[Child], interval_s: float) -> None:
        rng = random.Random()
        tick = 0
        next_round = time.monotonic()
        while not self.stopping.is_set():
            for child in children:
                if (code := child.exit_code()) is not None:
                    self._restart(child, code)
            if interval_s > 0 and time.monotonic() >= next_round:
                tick += 1
                next_round = time.monotonic() + interval_s
                self._schedule_round(tick, rng)
            self.stopping.wait(0.5)

    def _restart(self, child: Child, code: int) -> None:
        """Start a dead child again; give up (CommandError) if it keeps dying."""
        now = time.monotonic()
        child.deaths.append(now)
        if len(child.deaths) == MAX_RESTARTS and now - child.deaths[0] < RESTART_WINDOW_S:
            raise CommandError(f"{child.name} died {MAX_RESTARTS} times within "
                               f"{RESTART_WINDOW_S:.0f}s (last: {_describe_exit(code)}); "
                               "its last output:\n" + "\n".join(child.last_lines))
        logger.error("%s %s; starting it again", child.name, _describe_exit(code))
        child.start(self._write)

    def _schedule_round(self, tick: int, rng: random.Random) -> None:
        try:
            tasks = atf.schedule_many(demo_calls(tick, rng))
        except (AtfError, DatabaseError) as exc:
            logger.warning("could not schedule demo tasks: %s", exc)
            return
        logger.info("scheduled %d demo tasks (round %d)", len(tasks), tick)

    # --- stop ----------------------------------------------------------------------------

    def _on_signal(self, signum: int, frame: object) -> None:
        self.signals += 1
        if self.signals == 1:
            logger.info("stopping (%s); press Ctrl-C again to kill at once",
                        signal.Signals(signum).name)
        self.stopping.set()

    def _stop(self, children: list[Child]) -> None:
        """SIGTERM each child, wait for them (the worker's grace period and a bit), then SIGKILL."""
        running = [(c, c.process) for c in children
                   if c.process is not None and c.process.poll() is None]
        for _child, process in running:
            process.terminate()
        deadline = time.monotonic() + atf_settings.shutdown_grace_s + 5
        signals_at_start = self.signals  # one more signal: kill at once
        for child, process in running:
            while (child.exit_code() is None and time.monotonic() < deadline
                   and self.signals == signals_at_start):
                time.sleep(0.1)
            if child.exit_code() is None:
                logger.warning("%s did not stop in time: killing it", child.name)
            child.kill_group()
            process.wait()
            logger.info("%s stopped (%s)", child.name, _describe_exit(process.returncode))

    def _write(self, text: str, style: Callable[[str], str] | None = None) -> None:
        with self.output_lock:
            self.stdout.write(text, style_func=style)
            self.stdout.flush()


def _port_taken(host: str, port: int) -> bool:
    probe = "127.0.0.1" if host == "0.0.0.0" else "::1" if host == "::" else host
    try:
        with socket.create_connection((probe, port), timeout=0.5):
            return True
    except OSError:
        return False


def _default_password(host: str) -> str:
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    return "admin" if loopback else secrets.token_urlsafe(12)


def _describe_exit(code: int) -> str:
    """"exited with code 1" or "was killed by SIGKILL", from a Popen return code."""
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"
