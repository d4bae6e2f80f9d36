"""The long-running commands' logging: Django's task lines written as ATF's own, with their
time and level, in a project whose logging writes them nowhere, and in ATF's own project."""

from __future__ import annotations

import io
import logging
import re

import pytest

from tasks_core import logs

#: ATF's line: time, level, process, logger, message.
LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ERROR MainProcess "
                  + re.escape(logs.DJANGO_TASKS_LOGGER) + r": Task id=7 state=FAILED\n")


def test_a_command_writes_djangos_task_lines_as_atfs_where_the_project_gives_them_no_handler(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a project whose logging has no handler for Django's task logger (none above it)
    task_logger = logging.getLogger(logs.DJANGO_TASKS_LOGGER)
    monkeypatch.setattr(task_logger, "handlers", [])
    monkeypatch.setattr(task_logger, "propagate", False)
    # When a long-running command sets up its logging and a task fails
    stream = io.StringIO()
    logs.for_command(1, stream)
    task_logger.error("Task id=%s state=%s", 7, "FAILED")
    # Then the line has ATF's time, level and logger
    assert LINE.fullmatch(stream.getvalue())


def test_atfs_project_writes_djangos_task_lines_once_in_its_own_line() -> None:
    # Given ATF's project's LOGGING (the test settings use it)
    task_logger = logging.getLogger(logs.DJANGO_TASKS_LOGGER)
    # Then Django's task logger writes with ATF's line, and only there (not also through
    # Django's own console handler, which writes the bare message)
    formats = [handler.formatter._fmt for handler in task_logger.handlers if handler.formatter]
    assert logs.LINE_FORMAT in formats
    assert task_logger.propagate is False
