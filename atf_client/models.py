"""The values the client sends and receives: a call to schedule, and a task as the API shows it."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import InitVar, dataclass, field, fields
from datetime import datetime
from typing import Any


@dataclass(frozen=True, kw_only=True)
class Call:
    """One task to schedule, as the server's TaskRequest names its fields; unset options take
    the server's defaults. `delay` and `timeout` are seconds (`delay_s` is the older name of
    `delay`, deprecated)."""

    lambda_name: str
    payload: Any = None
    collection: str | None = None
    priority: str | None = None
    run_at: datetime | None = None
    delay: float | None = None
    idempotency_key: str | None = None
    max_attempts: int | None = None
    timeout: float | None = None
    after: Sequence[int] = ()
    limit_key: str | None = None  #: what the lambda's keyed limits count the task under
    debounce: float | None = None  #: seconds; a later call with the same debounce_key replaces it
    debounce_key: str | None = None
    delay_s: InitVar[float | None] = None

    def __post_init__(self, delay_s: float | None) -> None:
        if delay_s is not None:
            warnings.warn("Call(delay_s=...) is deprecated: use delay=... (seconds)",
                          DeprecationWarning, stacklevel=3)
            object.__setattr__(self, "delay", delay_s)

    def to_json(self) -> dict[str, Any]:
        """The request body of POST /v1/tasks/ for this call."""
        body: dict[str, Any] = {"lambda": self.lambda_name}
        for option in fields(self):
            value = getattr(self, option.name)
            if option.name == "lambda_name" or value is None or value == ():
                continue
            if isinstance(value, datetime):
                value = value.isoformat()
            body[option.name] = list(value) if option.name == "after" else value
        return body


def _when(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) else None


def _count(value: Any) -> int:
    """Attempts made: a number, or (from servers that list them) the list's length."""
    return len(value) if isinstance(value, list) else int(value or 0)


@dataclass(frozen=True, kw_only=True)
class Task:
    """A task as the API answered it; `data` holds every field, including ones added later."""

    id: int
    lambda_name: str
    collection: str
    priority: str
    status: str
    payload: Any
    attempts: int
    max_attempts: int
    run_at: datetime | None
    created_at: datetime | None
    finished_at: datetime | None
    result: Any
    last_error: Any
    idempotency_key: str | None
    data: Mapping[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Task:
        return cls(
            id=data["id"], lambda_name=data["lambda"], collection=data["collection"],
            priority=data["priority"], status=data["status"], payload=data.get("payload"),
            attempts=_count(data.get("attempts")), max_attempts=data.get("max_attempts", 0),
            run_at=_when(data.get("run_at")), created_at=_when(data.get("created_at")),
            finished_at=_when(data.get("finished_at")), result=data.get("result"),
            last_error=data.get("last_error"), idempotency_key=data.get("idempotency_key"),
            data=dict(data),
        )
