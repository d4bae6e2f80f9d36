"""The plain values passed between the store, its callers and its backends."""

from __future__ import annotations

import json
import traceback as traceback_module
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, NamedTuple, get_type_hints

from tasks_core import directory
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
    limit_key: str | None = None  #: what its lambda's keyed limits count it under
    debounce_key: str | None = None  #: a later debounced schedule with it replaces this task
    group_id: int | None = None  #: the group it is a member of
    group_position: int | None = None  #: its place among the group's members, from 1
    #: A group's callback: it starts `waiting`, and only its group's end releases it.
    held_for_group: bool = False


class Written(NamedTuple):
    """What a finish wrote about one task that its followers need."""

    has_children: bool  #: tasks wait on it (`after`)
    group_id: int | None  #: the group it is a member of


@dataclass(frozen=True)
class Lease:
    """A task and the lease its holder presents: a write goes through only while it is current."""

    task_id: int
    lease: int


#: The task columns a claimed task is read from, in `ClaimedTask.from_row`'s order.
CLAIMED_COLUMNS = ("pk", "lease", "lambda_ref_id", "collection", "priority", "payload",
                   "attempts", "max_attempts", "timeout_s")
#: CLAIMED_COLUMNS but the payload, which no write reads: what a worker's later calls about a
#: task it holds are checked and written with (StoreBackend.held_rows).
HELD_COLUMNS = tuple(column for column in CLAIMED_COLUMNS if column != "payload")
#: The worker API's names for the fields it has always called otherwise.
_WIRE_NAMES = {"task_id": "id", "lambda_name": "lambda"}


@dataclass(frozen=True, kw_only=True)
class ClaimedTask:
    """A task a worker holds, with everything one attempt of it needs.

    The one shape of a claimed task for every worker: the store's backends build it
    (`from_row`), the worker API sends it (`as_json`) and a remote worker reads it back
    (`from_json`), so a field added here travels over both transports.
    """

    task_id: int
    lease: int  #: the claim's lease, presented on every later write
    lambda_name: str
    collection: str
    priority: str
    payload: Any
    attempt: int  #: the attempt about to start (or running), counting from 1
    max_attempts: int
    timeout_s: float | None  #: seconds the attempt may run (task's, else lambda's); None: no limit
    heartbeat_timeout_s: float  #: seconds without a heartbeat after which the attempt is lost
    #: The W3C trace context it was scheduled in ({"traceparent", "tracestate"?}), for a
    #: worker that traces (tasks_core.tracing); None otherwise, and then not on the wire.
    trace: dict[str, str] | None = None

    @classmethod
    def from_row(cls, task_id: int, lease: int, lambda_id: int, collection: str, priority: str,
                 payload: Any, attempts: int, max_attempts: int, timeout_s: float | None, *,
                 started: bool = False) -> ClaimedTask:
        """The claimed task of a row read as CLAIMED_COLUMNS; its lambda's options fill in
        what the task leaves to them. The time limit is the task's own, else its lambda's (an
        operator's override, else the code's, else ATF_TASK_TIMEOUT_S); 0 at any level: None,
        no limit. `started`: the row's attempt has begun (it counts)."""
        info = directory.by_id(lambda_id)
        return cls(task_id=task_id, lease=lease, lambda_name=info.name, collection=collection,
                   priority=priority, payload=payload,
                   attempt=attempts if started else attempts + 1, max_attempts=max_attempts,
                   timeout_s=(info.timeout_s if timeout_s is None else timeout_s) or None,
                   heartbeat_timeout_s=info.heartbeat_timeout_s)

    def as_json(self) -> dict[str, Any]:
        """The task as the worker API's claim answers it."""
        answer = {_WIRE_NAMES.get(name, name): getattr(self, name) for name in _CLAIMED_FIELDS}
        if self.trace is not None:
            answer["trace"] = self.trace
        return answer

    @classmethod
    def from_json(cls, item: Mapping[str, Any]) -> ClaimedTask:
        """The task of one item of the worker API's claim answer (`as_json`'s inverse)."""
        return cls(**{name: item[_WIRE_NAMES.get(name, name)] for name in _CLAIMED_FIELDS},
                   trace=item.get("trace"))

    @classmethod
    def wire_types(cls) -> dict[str, Any]:
        """Each field of the claim answer, by its name there, with its Python type."""
        hints = get_type_hints(cls)
        return {_WIRE_NAMES.get(name, name): hints[name] for name in _CLAIMED_FIELDS}


#: The fields every claim answer carries (`trace` only where there is one).
_CLAIMED_FIELDS = tuple(f.name for f in fields(ClaimedTask) if f.name != "trace")


@dataclass(frozen=True, kw_only=True)
class Starts:
    """What a batch of starts did: tasks that started, and tasks a closed gate stopped."""

    started: set[int]
    held: set[int] = field(default_factory=set)  #: paused: back to `new`, due again
    dropped: set[int] = field(default_factory=set)  #: dropped: ended `dropped`


@dataclass(frozen=True, kw_only=True)
class Result:
    """What an attempt ended with, as the executor saw it."""

    outcome: Outcome
    value: Any = None  #: the JSON result, on success
    #: `value` as compact JSON text (`encode`), where the executor has encoded it already: the
    #: store writes this text and never encodes the value again (None: encoded when needed).
    value_json: str | None = None
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
    cancel_requested: bool = False  #: a cancel asked its worker to stop it


@dataclass(frozen=True, kw_only=True)
class LostAttempt:
    """An attempt whose worker stopped heartbeating: the consumer records it as lost."""

    task_id: int
    worker: str
    started_at: datetime


@dataclass(frozen=True, kw_only=True)
class Ending:
    """One attempt's end as finishing writes it (`None` leaves a column as it is)."""

    task_id: int
    lease: int
    status: TaskStatus
    result: Any
    result_json: str | None  #: `result` as JSON text (None: no result, the column stays)
    error: dict[str, str] | None  #: the attempt's error; also the task's last_error when set
    finished_at: datetime | None
    assoc: AssocChange
    worker: str
    started_at: datetime
    outcome: str  #: the attempt row's outcome


def encode(value: Any) -> str:
    """A result's JSON text: compact, the form whose size ATF_MAX_RESULT_BYTES bounds and the
    one the store writes. NaN and infinities are refused (ValueError): PostgreSQL's jsonb
    takes neither."""
    return json.dumps(value, allow_nan=False, separators=(",", ":"))


def error_info(exc: BaseException) -> dict[str, str]:
    """The {"type", "message", "traceback"} record of an exception."""
    return {
        "type": type(exc).__name__,
        "message": str(exc),
        "traceback": "".join(traceback_module.format_exception(exc)),
    }
