"""Finding the lambdas: the `lambdas.py` module of every installed app, imported as Django's
admin imports `admin.py`.

In `runworker --reload` (both its processes) a module that cannot be imported does not stop
Django from starting, as in `runserver`: the error is kept for the command to report in one
line (`broken_code`), and Django's autoreloader watches the broken file, so the next change
starts the worker again. Anywhere else the error is raised, as Django raises it.
"""

from __future__ import annotations

import sys
import traceback

from django.utils import autoreload
from django.utils.module_loading import autodiscover_modules

#: Why the lambdas could not all be imported, in one line; None when they could.
_broken: str | None = None


def reloading_worker(argv: list[str] | None = None) -> bool:
    """Whether this process runs `runworker --reload` (Django checks `runserver` the same way:
    before any command is loaded, its command line is all there is to go by)."""
    args = sys.argv if argv is None else argv
    return args[1:2] == ["runworker"] and "--reload" in args[2:]


def discover_lambdas() -> None:
    global _broken
    if not reloading_worker():
        autodiscover_modules("lambdas")
        return
    try:
        # check_errors adds the broken module's file to those the autoreloader watches.
        autoreload.check_errors(autodiscover_modules)("lambdas")
    except Exception as exc:  # noqa: BLE001 - any error of the project's code, reported in one line
        _broken = one_line(exc)


def broken_code() -> str | None:
    """Why the project's lambdas could not be imported (`file:line: error`), or None."""
    return _broken


def one_line(exc: BaseException) -> str:
    """`file:line: error` for an exception raised by importing code."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"{exc.filename}:{exc.lineno}: {type(exc).__name__}: {exc.msg}"
    frames = traceback.extract_tb(exc.__traceback__)
    where = f"{frames[-1].filename}:{frames[-1].lineno}: " if frames else ""
    return f"{where}{type(exc).__name__}: {exc}"
