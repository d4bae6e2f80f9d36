"""Helpers shared by the operator commands (atf_gate, atf_dlq, atf_status, atf_prune):
argument types for durations and times, a progress bar, and plain-text tables."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import TextIO

from django.core.management.base import OutputWrapper
from django.utils import timezone

from tasks_core.exceptions import InvalidTask

_UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


def duration_s(text: str) -> float:
    """Seconds in a duration such as "90", "30s", "15m", "1h30m", "7d" or "2w" (argparse type)."""
    text = text.strip().lower()
    try:
        value = float(text)
    except ValueError:
        parts = _PART.findall(text)
        if not parts or "".join(n + u for n, u in parts) != text:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a duration; write e.g. 90, 30s, 15m, 1h30m, 7d or 2w"
            ) from None
        value = sum(float(number) * _UNITS_S[unit] for number, unit in parts)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a duration must be more than zero")
    return value


def moment(text: str, *, now: datetime | None = None) -> datetime:
    """An ISO 8601 time (naive ones in the current time zone), or now + a duration."""
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        try:
            return (now or timezone.now()) + timedelta(seconds=duration_s(text))
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is neither an ISO 8601 time (2026-01-31T18:00:00Z) nor a duration "
                "(30m, 2h, 1d)"
            ) from None
    return timezone.make_aware(when) if timezone.is_naive(when) else when


def ids(text: str) -> list[int]:
    """Task ids written "1,2,3" (argparse type)."""
    try:
        values = [int(part) for part in text.replace(" ", "").split(",") if part]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give task ids as 1,2,3") from None
    if not values:
        raise argparse.ArgumentTypeError("give at least one task id")
    return values


def errors_line(exc: InvalidTask) -> str:
    """A domain error's field messages as one line, for a CommandError."""
    return " ".join(message for messages in exc.errors.values() for message in messages)


def examples(parser: argparse.ArgumentParser, *lines: str) -> None:
    """Show these example command lines at the end of --help."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = "examples:\n" + "\n".join(f"  manage.py {line}" for line in lines)


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """Rows as left-aligned columns under their headers."""
    cells = [[str(cell) for cell in row] for row in [headers, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
                     .rstrip() for row in cells)


class Progress:
    """A one-line progress bar on a terminal; silent when the stream is not one."""

    def __init__(self, stream: TextIO | OutputWrapper, *, total: int, label: str,
                 width: int = 30) -> None:
        self.stream = stream
        self.total = max(total, 0)
        self.label = label
        self.width = width
        self.enabled = bool(getattr(stream, "isatty", lambda: False)())
        self.done = 0

    def advance(self, count: int) -> None:
        self.done += count
        if not self.enabled:
            return
        fraction = min(self.done / self.total, 1.0) if self.total else 1.0
        filled = int(fraction * self.width)
        bar = "#" * filled + "-" * (self.width - filled)
        self._write(f"\r{self.label} [{bar}] {fraction:4.0%} {self.done}/{self.total}")

    def close(self) -> None:
        if self.enabled:
            self._write("\n")

    def _write(self, text: str) -> None:
        if isinstance(self.stream, OutputWrapper):
            self.stream.write(text, ending="")
        else:
            self.stream.write(text)
        self.stream.flush()
