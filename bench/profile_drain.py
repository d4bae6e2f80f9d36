"""Where ATF's CPU goes: `python -m bench.profile_drain [--remote | --rest] [--tasks N]`.

Runs ATF's drain as `make bench` does (the consumer and `runworker --threads 64`; with
`--remote`, the worker reaches ATF through the API, served by the documented gunicorn config),
or, with `--rest`, the API taking single `POST /tasks/` as fast as 4 client threads send them.
While they work it records each process with `py-spy`, sampling the thread that holds the GIL
(the Python work, not the waits), and prints per process the share of its samples by area
(our packages, Django's ORM, psycopg, DRF, JSON, Redis, ...), by ATF function (its own time
and what it called) and by the function on the CPU. Run it in the peers'
virtualenv, which has py-spy (`bench/.venv-peers/bin/python -m bench.profile_drain`); py-spy
needs the right to trace other processes (root, or ptrace_scope 0).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import redis

from bench import measure, services
from bench.procs import Fleet, run_once
from bench.run import QUICK, _targets

#: Areas a frame's file belongs to, first match wins: (label, path fragment).
AREAS = (("ATF: tasks_core", "tasks_core/"), ("ATF: workers", "workers/"),
         ("ATF: tasks_api", "tasks_api/"), ("ATF: demo lambdas", "demo/"),
         ("DRF", "rest_framework/"), ("Django ORM", "django/db/"), ("Django (other)", "django/"),
         ("psycopg", "psycopg"), ("redis-py", "redis/"), ("gunicorn", "gunicorn/"),
         ("json", "json/"), ("logging", "logging/"), ("threading, queue, socket", "threading.py"),
         ("threading, queue, socket", "queue.py"), ("threading, queue, socket", "socket.py"),
         ("threading, queue, socket", "selectors.py"))
ROLES = ("worker", "consumer", "api")


def area_of(frame: str) -> str:
    """The area of a frame "function (path:line)". py-spy names a file by its path below its
    sys.path entry: ours start with their package, a library's may hold its site-packages."""
    path = frame.rpartition(" (")[2]
    for label, fragment in AREAS:
        if path.startswith(fragment) or (not label.startswith("ATF")
                                         and f"/{fragment}" in path):
            return label
    return "other"


def function_of(frame: str) -> str:
    """"held (tasks_core/remote_workers.py:186)" -> "held (tasks_core/remote_workers.py)"."""
    name, _, path = frame.rpartition(" (")
    return f"{name} ({path.rpartition(':')[0]})" if ":" in path else frame


def stacks(raw: Path) -> collections.Counter[tuple[str, ...]]:
    """Samples by stack (outermost frame first), from py-spy's raw (collapsed) output: one
    line per stack, its frames joined by ';' and its count last."""
    counts: collections.Counter[tuple[str, ...]] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            counts[tuple(stack.split(";"))] += int(count)
    return counts


def innermost_ours(stack: tuple[str, ...]) -> str:
    """The deepest frame of ATF's own code: the function of ours whose work the sample was."""
    return next((function_of(frame) for frame in reversed(stack)
                 if area_of(frame).startswith("ATF")), "(no ATF frame)")


def _shares(title: str, counts: collections.Counter[str], total: int, top: int) -> list[str]:
    return [title] + [f"  {100 * n / total:5.1f}%  {name}" for name, n in counts.most_common(top)]


def summary(role: str, samples: collections.Counter[tuple[str, ...]], *, top: int) -> str:
    total = sum(samples.values()) or 1
    by_area: collections.Counter[str] = collections.Counter()
    by_leaf: collections.Counter[str] = collections.Counter()
    by_ours: collections.Counter[str] = collections.Counter()
    for stack, count in samples.items():
        by_area[area_of(stack[-1])] += count
        by_leaf[function_of(stack[-1])] += count
        by_ours[innermost_ours(stack)] += count
    return "\n".join([
        f"== {role}: {total} samples holding the GIL",
        *_shares("share by area (self time):", by_area, total, len(AREAS)),
        *_shares(f"top {top} of ATF's functions (its own time and what it called):", by_ours,
                 total, top),
        *_shares(f"top {top} functions (self time):", by_leaf, total, top)])


def record(pids: dict[str, int], seconds: float, into: Path) -> dict[str, Path]:
    """py-spy each process (and its children) for `seconds`, all at once."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    outputs, spies = {}, []
    for role, pid in pids.items():
        outputs[role] = into / f"{role}.txt"
        spies.append(subprocess.Popen(
            [spy, "record", "--pid", str(pid), "--subprocesses", "--gil", "--nonblocking",
             "--rate", "200", "--duration", str(int(seconds)), "--format", "raw",
             "--output", str(outputs[role])], stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL))
    for spy_process in spies:
        spy_process.wait()
    return {role: path for role, path in outputs.items() if path.exists()}


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.profile_drain", description=__doc__)
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--remote", action="store_true", help="profile the remote drain")
    what.add_argument("--rest", action="store_true",
                      help="profile the API taking single POST /tasks/ (4 client threads)")
    parser.add_argument("--tasks", type=int, default=60_000, help="tasks drained (60,000)")
    parser.add_argument("--seconds", type=float, default=8.0, help="seconds recorded (8)")
    parser.add_argument("--top", type=int, default=15, help="functions shown per process")
    parser.add_argument("--pg-url", default="postgresql://postgres@127.0.0.1:5432")
    parser.add_argument("--db-prefix", default="profile",
                        help="prefix of the database's name (profile): one of its own for each "
                        "profile that runs at once on this server")
    return parser.parse_args(argv)


def _print(outputs: dict[str, Path], top: int) -> None:
    for role, path in outputs.items():
        print(summary(role, stacks(path), top=top))


def _profile_drain(target: measure.Target, args: argparse.Namespace, scratch: Path,
                   stack: contextlib.ExitStack) -> None:
    target.backlog("record", "drain", args.tasks)
    fleets = [Fleet("atf", target.driver.worker_commands(target.env))]
    if args.remote:
        api, url, token = measure._api(target)
        stack.enter_context(api)
        services.wait_for_port(int(url.rsplit(":", 1)[1]), timeout_s=30)
        fleets = [measure.remote_drain_fleet(target, url, token), api]
    stack.enter_context(fleets[0])
    key = target.driver.record_key("drain")
    while redis.Redis.from_url(target.env.redis_url).llen(key) < args.tasks // 20:
        fleets[0].check_alive()
        time.sleep(0.05)
    pids = {role: popen.pid for fleet in fleets for role, popen in fleet.popens
            if role in ROLES}
    _print(record(pids, args.seconds, scratch), args.top)
    done = redis.Redis.from_url(target.env.redis_url).llen(key)
    print(f"{done} of {args.tasks} tasks done when the recording ended "
          f"({'remote' if args.remote else 'direct'} drain)")


#: Single POSTs sent per second of recording (more than the API takes: it is never idle).
REST_POSTS_PER_S = 1_500


def _profile_rest(target: measure.Target, args: argparse.Namespace, scratch: Path,
                  stack: contextlib.ExitStack) -> None:
    token = run_once(target.driver.token_command(target.env)).strip().splitlines()[-1]
    port = services.free_port()
    api = stack.enter_context(Fleet("atf", [target.driver.api_command(target.env, port)]))
    services.wait_for_port(port, timeout_s=30)
    body = json.dumps({"lambda": "demo.noop", "payload": {}}).encode()
    measure._post_many(port, measure.SINGLE, body, token, 40,  # warm every server thread up
                       measure.REST_CLIENT_THREADS)
    count = int(REST_POSTS_PER_S * args.seconds)
    client = threading.Thread(target=measure._post_many, args=(
        port, measure.SINGLE, body, token, count, measure.REST_CLIENT_THREADS))
    client.start()
    _print(record({"api": api.popens[0][1].pid}, args.seconds, scratch), args.top)
    client.join()


def main(argv: list[str]) -> None:
    args = _arguments(argv)
    plan = measure.Plan(**{**QUICK.__dict__, "drain_n": args.tasks})
    with contextlib.ExitStack() as stack, tempfile.TemporaryDirectory() as scratch:
        redis_url = stack.enter_context(services.PrivateRedis())
        (target,) = _targets(["atf"], redis_url, args.pg_url, plan, prefix=args.db_prefix)
        target.reset()
        profile = _profile_rest if args.rest else _profile_drain
        profile(target, args, Path(scratch), stack)


if __name__ == "__main__":
    main(sys.argv[1:])
