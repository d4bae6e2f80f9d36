"""The plain values passed between the store, its callers and its backends."""

from __future__ import annotations

import traceback as traceback_module
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tasks_core.models import TaskAttempt
from tasks_core.queues.base import Message
from tasks_core.states import TaskStatus

Outcome = TaskAttempt.Outcome


@dataclass(frozen=True, kw_only=True)
class NewTask:
    """A validated task to insert (scheduling builds these)."""

    lambda_id: int
    collection: str
    priority: str
    payload: Any
    run_at: datetime
    max_attempts: int
    idempotency_key: str | None = None
    timeout_s: float | None = None  #: None: the lambda's time limit
    parents: tuple[int, ...] = ()


@dataclass(frozen=True)
class Lease:
    """A task and the lease its holder presents: a write goes through only while it is current."""

    task_id: int
    lease: int


@dataclass(frozen=True, kw_only=True)
class ClaimedTask:
    """A task a controller holds, with what an executor needs to run it."""

    task_id: int
    lease: int
    lambda_name: str
    collection: str
    priority: str
    payload: Any
    attempt: int  #: the attempt about to start, counting from 1
    max_attempts: int
    timeout_s: float | None = None  #: seconds the attempt may run (task's, else lambda's)


@dataclass(frozen=True, kw_only=True)
class Result:
    """What an attempt ended with, as the executor saw it."""

    outcome: Outcome
    value: Any = None  #: the JSON result, on success
    error: dict[str, str] | None = None  #: {"type", "message", "traceback"}
    delay_s: float | None = None  #: an explicit retry delay (atf.Retry(delay=...))
    started_at: datetime | None = None
    worker: str = ""


@dataclass(kw_only=True)
class DueBatch:
    """What one pass of the consumer over one lambda did."""

    messages: list[tuple[str, Message]] = field(default_factory=list)  #: (priority, message)
    reenqueued: dict[str, int] = field(default_factory=lambda: defaultdict(int))  #: by old status
    dropped: int = 0
    dead: int = 0


@dataclass(frozen=True, kw_only=True)
class AssocChange:
    """The assoc columns a transition writes: the assoc status and the next trigger."""

    status: str
    next_trigger_at: datetime | None


@dataclass(frozen=True, kw_only=True)
class DueRow:
    """A due task as the consumer's pass reads it (its row locked until the pass commits)."""

    task_id: int
    status: TaskStatus
    lease: int
    collection: str
    priority: str
    attempts: int
    max_attempts: int
    worker: str
    started_at: datetime | None


@dataclass(frozen=True, kw_only=True)
class ClaimRow:
    """A task a claim took, its lease already bumped."""

    task_id: int
    lease: int
    lambda_id: int
    collection: str
    priority: str
    payload: Any
    attempts: int
    max_attempts: int
    timeout_s: float | None  #: the task's own time limit; None: its lambda's


@dataclass(frozen=True, kw_only=True)
class LostAttempt:
    """An attempt whose worker stopped heartbeating: the consumer records it as lost."""

    task_id: int
    number: int
    worker: str
    started_at: datetime


@dataclass(frozen=True, kw_only=True)
class Ending:
    """One attempt's end as finishing writes it (`None` leaves a column as it is)."""

    task_id: int
    lease: int
    status: TaskStatus
    result: Any
    error: dict[str, str] | None  #: the attempt's error; also the task's last_error when set
    finished_at: datetime | None
    assoc: AssocChange
    attempt: int
    worker: str
    started_at: datetime
    outcome: str  #: the attempt row's outcome


def error_info(exc: BaseException) -> dict[str, str]:
    """The {"type", "message", "traceback"} record of an exception."""
    return {
        "type": type(exc).__name__,
        "message": str(exc),
        "traceback": "".join(traceback_module.format_exception(exc)),
    }
