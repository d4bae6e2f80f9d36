"""What a gate holds back: counts over the consumer's small assoc rows (partial index)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Q, QuerySet

from tasks_core import gating
from tasks_core.models import Collection, Lambda, TaskAssoc
from tasks_core.states import AssocStatus, TaskStatus


@dataclass(frozen=True, kw_only=True)
class GateTarget:
    """A lambda, or one collection of it: what `set_gate` takes."""

    lambda_id: int
    lambda_name: str
    collection: str | None = None

    @classmethod
    def of(cls, row: Lambda | Collection) -> GateTarget:
        if isinstance(row, Collection):
            return cls(lambda_id=row.lambda_ref_id, lambda_name=row.lambda_ref.name,
                       collection=row.name)
        return cls(lambda_id=row.pk, lambda_name=row.name)

    def __str__(self) -> str:
        return self.lambda_name + (f"/{self.collection}" if self.collection else "")


def _open_rows(target: GateTarget) -> QuerySet[TaskAssoc]:
    rows = TaskAssoc.objects.filter(lambda_ref_id=target.lambda_id,
                                    next_trigger_at__isnull=False)
    rows = rows.exclude(status=AssocStatus.COMPLETED)
    if target.collection is not None:
        rows = rows.filter(collection=target.collection)
    return rows


def due_count(target: GateTarget, now: datetime) -> int:
    """What a closed gate holds back (or drops) right now: tasks waiting whose trigger has
    fired, and queued tasks (`enqueued`, `claimed`), which go back to waiting (or end dropped)
    when a worker takes them. Running tasks are not counted: they run to their end."""
    queued = Q(task__status__in=[TaskStatus.ENQUEUED, TaskStatus.CLAIMED])
    return (_open_rows(target).filter(Q(next_trigger_at__lte=now) | queued)
            .exclude(task__status=TaskStatus.PROCESSING).count())


def coming_count(target: GateTarget, until: datetime | None) -> int:
    """Unfinished tasks whose trigger fires before `until` (all of them without `until`)."""
    rows = _open_rows(target)
    if until is not None:
        rows = rows.filter(next_trigger_at__lt=until)
    return rows.count()


def describe(row: Lambda | Collection, now: datetime) -> str:
    """The gate as a person reads it: `open`, `paused until …`, `dropped (expired …)`."""
    gate = row.gate_value
    if gate.state is gating.GateState.OPEN:
        return "open"
    if gating.effective(gate, now) is gating.GateState.OPEN:
        return f"open ({gate.state} expired {gate.until:%Y-%m-%d %H:%M} UTC)"
    if gate.until is not None:
        return f"{gate.state} until {gate.until:%Y-%m-%d %H:%M} UTC"
    return str(gate.state)


def is_closed(row: Lambda | Collection, now: datetime) -> bool:
    return gating.effective(row.gate_value, now) is not gating.GateState.OPEN
