"""ATF's loggers in any project: their level from ATF_LOG_LEVEL, and a line on stderr for the
long-running commands when the project's logging gives them no handler.

A project's LOGGING wins where it speaks: a level it gives `tasks_core` or `workers` stays, and
a handler it gives them (or the root logger) is where their records go. Without LOGGING a
worker or consumer started by hand still says what it does: its start, a summary of finished
tasks every few seconds, and its warnings and errors.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

import django

#: The loggers ATF_LOG_LEVEL sets (every module logs on its `__name__`).
LOGGERS = ("tasks_core", "workers")
#: The logger of Django's tasks framework (`django.tasks` on Django 6, the django-tasks
#: backport on 5.2), on which a worker's `@task` functions are said to start, finish and fail.
DJANGO_TASKS_LOGGER = "django.tasks" if django.VERSION >= (6, 0) else "django_tasks"
#: How the long-running commands' own handler writes a record.
LINE_FORMAT = "%(asctime)s %(levelname)s %(processName)s %(name)s: %(message)s"
#: `--verbosity` of a long-running command: 0 warnings and errors only, 1 ATF_LOG_LEVEL, more
#: everything.
VERBOSITY_LEVELS = {0: logging.WARNING, 2: logging.DEBUG, 3: logging.DEBUG}


def level_number(name: object) -> int | None:
    """The level a name such as "info" stands for; None for anything else."""
    if not isinstance(name, str):
        return None
    return logging.getLevelNamesMapping().get(name.upper())


def apply_level(name: object) -> None:
    """Give ATF's loggers the level `name`, except those the project's LOGGING gave one (an
    unknown name changes nothing: check atf.E008 reports it)."""
    level = level_number(name)
    if level is None:
        return
    for logger_name in LOGGERS:
        logger = logging.getLogger(logger_name)
        if logger.level == logging.NOTSET:
            logger.setLevel(level)


def for_command(verbosity: int, stream: TextIO | None = None) -> None:
    """Logging of runconsumer and runworker: `--verbosity` other than 1 sets ATF's levels, and
    ATF's loggers and Django's task logger (at the level the project gives it) write to
    `stream` (stderr), in ATF's line, when no handler of the project's takes their records."""
    if verbosity in VERBOSITY_LEVELS:
        for logger_name in LOGGERS:
            logging.getLogger(logger_name).setLevel(VERBOSITY_LEVELS[verbosity])
    handler: logging.Handler | None = None
    for logger_name in (*LOGGERS, DJANGO_TASKS_LOGGER):
        logger = logging.getLogger(logger_name)
        if not logger.hasHandlers():
            if handler is None:
                handler = logging.StreamHandler(stream or sys.stderr)
                handler.setFormatter(logging.Formatter(LINE_FORMAT))
            logger.addHandler(handler)
