"""A worker process that must end (a lambda hung past its time limit, heartbeats lost) replaces
itself instead of leaving its lambdas unserved until something outside restarts it.

It executes its own command line again (`os.execv`, same pid), with `--replaces REASON`
added: every thread of the old image, the hung lambda's included, is gone before the new image
runs a line, so no attempt of the old process can overlap one of the new. The new image,
instead of failing its start-up checks, waits until the store or the API answers again. A
child of `runworker --processes N` (started with `--supervised`) exits with its status
instead, as before, and its supervisor starts a fresh one.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable
from typing import NoReturn, TypeVar

from django.core.management.base import CommandError
from django.db import DatabaseError

from tasks_core.exceptions import AtfError
from workers import db

logger = logging.getLogger(__name__)

#: What the log line of a process about to replace itself begins with (tests and log searches
#: look for it).
REPLACING = "replacing this worker process"
#: The runworker option that tells a replacement image why it replaced the previous one.
REPLACES_OPTION = "--replaces"
#: The runworker option the supervisor gives its children: exit, and let it start another.
SUPERVISED_OPTION = "--supervised"
#: Seconds between two tries of a replacement to reach the store or the API (the most).
RETRY_MAX_S = 10.0
#: Whether this process's supervisor restarts it (set by runworker from SUPERVISED_OPTION).
supervised = False

T = TypeVar("T")


def _flush_logs() -> None:
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()


def _own_command(reason: str) -> list[str]:
    """This process's command line, with `--replaces reason` in place of any earlier one."""
    argv = list(sys.orig_argv[1:])
    if REPLACES_OPTION in argv:
        at = argv.index(REPLACES_OPTION)
        del argv[at:at + 2]
    return [sys.executable, *argv, REPLACES_OPTION, reason]


def end_process(reason: str, exit_code: int) -> NoReturn:
    """End this process at once: replaced by a fresh image of itself, or (under a supervisor)
    exited with `exit_code`."""
    if supervised:
        logger.critical("exiting with %d for the supervisor to start a fresh process", exit_code)
        _flush_logs()
        os._exit(exit_code)
    logger.critical("%s with a fresh one (pid %d stays): %s", REPLACING, os.getpid(), reason,
                    extra={"action": "worker_replaced"})
    _flush_logs()
    try:
        os.execv(sys.executable, _own_command(reason))
    except OSError:
        logger.exception("could not replace the process; exiting with %d", exit_code)
        _flush_logs()
    os._exit(exit_code)


def until_reachable(start: Callable[[], T], *, replaces: str | None) -> T:
    """`start()` (connect, check, build the worker); in a replacement image (`replaces`: why
    the previous one ended), retried while the store or the API cannot be reached. A fresh
    start fails at once, as before."""
    if replaces is None:
        return start()
    logger.warning("this worker process replaced its previous image (%s); starting once ATF "
                   "answers", replaces)
    delay_s = 0.5
    while True:
        try:
            return start()
        except (CommandError, AtfError, DatabaseError) as exc:
            logger.warning("replacement worker waiting for ATF to answer (next try in %.1fs): "
                           "%s", delay_s, exc)
            db.reset_connection()  # a connection the server ended answers "closed" for ever
            time.sleep(delay_s)
            delay_s = min(delay_s * 2, RETRY_MAX_S)
