"""The test suite in its two phases (`make test`, and each combination of `make test-matrix`).

    python scripts/run_suite.py [--python PATH] [--workers N] [-- pytest args]

First every test but those marked `serial`, spread over N pytest-xdist worker processes (each
with a test database, a Redis database, a queue prefix and ports of its own: tests/parallel.py);
then the `serial` ones, which cannot share the machine, alone in one process. Both phases run
whatever the first gave; the exit status is the first failing phase's, 0 when both passed (a
phase with no test to run, as `-k` or a file of no serial test leaves, counts as passed).

N: --workers, else one for each CORES_PER_WORKER of the machine's cores, at most the 8 Redis
databases the workers take by default (ATF_TEST_REDIS_DATABASES); below two of them (a machine
of fewer than 8 cores) the first phase runs in one process, without xdist, as `--workers 0`
asks. A test keeps about two cores busy (it and the workers, consumers and servers it
starts): on a 2-core machine two pytest workers gained about a fifth of the wall time, too
little for the timing tests a loaded machine puts at risk.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: pytest's exit status when it ran no test.
NO_TESTS = 5
#: The most workers by default: the Redis databases tests/parallel.py gives them (1-8).
MAX_DEFAULT_WORKERS = 8
#: Cores each default worker gets: a test, and the processes it starts, keep about two busy.
CORES_PER_WORKER = 4


def default_workers() -> int:
    """Workers for this machine; 0 (one process, no xdist) where fewer than two fit."""
    workers = min(MAX_DEFAULT_WORKERS, (os.cpu_count() or 1) // CORES_PER_WORKER)
    return workers if workers >= 2 else 0


def run(python: str, workers: int, pytest_args: list[str]) -> int:
    """Both phases with `python -m pytest`; the first failing phase's status, else 0."""
    phases = [
        # worksteal: a worker that runs out of tests takes some of another's queue, so the
        # slow acceptance tests do not leave one worker busy alone at the end
        ("parallel", ["-n", str(workers), "--dist", "worksteal"],
         f"{workers} pytest processes at once" if workers else "one pytest process"),
        ("serial", ["-p", "no:xdist"], "the tests marked serial, alone"),
    ]
    statuses = []
    for phase, options, what in phases:
        print(f"==> the test suite, {phase} phase: {what}", flush=True)
        command = [python, "-m", "pytest", *options, f"--phase={phase}", *pytest_args]
        statuses.append(subprocess.run(command, cwd=ROOT).returncode)
    if all(status == NO_TESTS for status in statuses):
        print("==> pytest collected no tests")
    return next((status for status in statuses if status not in (0, NO_TESTS)), 0)


def main(argv: list[str]) -> int:
    ours, pytest_args = argv, []
    if "--" in argv:
        ours, pytest_args = argv[:argv.index("--")], argv[argv.index("--") + 1:]
    parser = argparse.ArgumentParser(prog="run_suite.py", description=__doc__.split("\n")[0])
    parser.add_argument("--python", default=str(ROOT / ".venv" / "bin" / "python"),
                        help="the interpreter of the virtualenv to test in (.venv's)")
    parser.add_argument("--workers", type=int, default=default_workers(),
                        help="xdist worker processes of the parallel phase (0: none)")
    args = parser.parse_args(ours)
    if args.workers < 0:
        parser.error(f"--workers is {args.workers}; it must be 0 or more")
    return run(args.python, args.workers, pytest_args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
