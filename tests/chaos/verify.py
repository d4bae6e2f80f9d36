"""The end-of-run checks: nothing lost, nothing run twice at once, nothing run after it finished.

- lost: tasks not in a final status once the run settled (in any collection).
- not_success: final tasks outside the dropped collections that did not succeed (every chaos
  task is meant to succeed: demo.fail ones only fail their first attempts, and each may take
  MAX_ATTEMPTS attempts).
- overlapping: pairs of recorded executions of one task whose [start, end] intervals overlap.
- ran_after_finish: recorded executions that started after their task's finished_at.
- delivery latency: first attempt's start minus run_at, for all tasks and for tasks that
  became due during a fault (from its start to RECOVERY_S after its end).
- vanished: schedules the loader was told were done (each has its idempotency key
  `chaos-<n>`) that are not in the store at the end: what an asynchronous failover loses.
- time to full speed after each failover (tests/chaos/recovery.py).

With a sharded store every check reads every shard (tasks_core.shards.across).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from django.db.models import Count, Min

from tasks_core import shards, states
from tasks_core.models import TaskAttempt, TaskEntity
from tests.chaos.failover import Promotion
from tests.chaos.faults import FaultEvent
from tests.chaos.load import KEY_PREFIX
from tests.chaos.records import Execution
from tests.chaos.recovery import time_to_full_speed

#: Seconds after a fault during which a task that became due still counts as "during faults".
RECOVERY_S = 6.0
FINAL = {status.value for status in states.FINAL}


def _joined(answers: list[list]) -> list:
    """Every shard's rows, one list."""
    return [row for answer in answers for row in answer]


def percentile(ordered: Sequence[float], q: float) -> float:
    """The `q` quantile of non-empty sorted values, interpolated between the two nearest, as
    PostgreSQL's percentile_cont computes it."""
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def percentiles(values: Sequence[float]) -> dict[str, float]:
    """p50, p90, p99 (interpolated, as PostgreSQL's percentile_cont) and max of `values`
    (zeros when empty)."""
    if not values:
        return {"p50": 0.0, "p90": 0.0, "p99": 0.0, "max": 0.0}
    ordered = sorted(values)
    return {"p50": percentile(ordered, 0.5), "p90": percentile(ordered, 0.9),
            "p99": percentile(ordered, 0.99), "max": ordered[-1]}


def format_ms(values: dict[str, float]) -> str:
    return " ".join(f"{name}={value * 1000:.0f}ms" for name, value in values.items())


def count_overlaps(executions: Iterable[Execution]) -> list[tuple[Execution, Execution]]:
    """Pairs of executions of one task that ran at the same time."""
    by_task: dict[int, list[Execution]] = defaultdict(list)
    for execution in executions:
        by_task[execution.task_id].append(execution)
    pairs = []
    for runs in by_task.values():
        runs.sort(key=lambda run: run.start)
        latest = runs[0]
        for run in runs[1:]:
            if run.start < latest.end:
                pairs.append((latest, run))
            if run.end > latest.end:
                latest = run
    return pairs


@dataclass(kw_only=True)
class Report:
    tasks: int = 0
    lost: list[int] = field(default_factory=list)
    not_success: dict[str, int] = field(default_factory=dict)
    dropped_collections: dict[str, int] = field(default_factory=dict)  #: status -> count
    overlapping: list[tuple[Execution, Execution]] = field(default_factory=list)
    ran_after_finish: list[Execution] = field(default_factory=list)
    reruns: int = 0
    records_missing: int = 0
    latency_all: dict[str, float] = field(default_factory=dict)
    latency_faults: dict[str, float] = field(default_factory=dict)
    faults_ok: int = 0
    faults: int = 0
    faults_crossed: int = 0  #: ok, but a crash task ended the watched process first
    vanished: list[int] = field(default_factory=list)  #: acknowledged schedules' numbers
    full_speed_s: list[float | None] = field(default_factory=list)  #: one per failover

    @property
    def failed(self) -> bool:
        return bool(self.lost or self.not_success or self.overlapping or self.ran_after_finish
                    or self.vanished or self.faults_ok < self.faults)

    def lines(self) -> list[str]:
        out = [f"tasks: {self.tasks}; in dropped collections: {self.dropped_collections}"]
        if self.lost:
            out.append(f"LOST (not final): {self.lost[:20]}")
        if self.vanished:
            out.append(f"VANISHED (acknowledged, then gone from the store): "
                       f"{len(self.vanished)} schedule(s), numbers {self.vanished[:20]}")
        if self.not_success:
            out.append(f"NOT SUCCESS outside dropped collections: {self.not_success}")
        for first, second in self.overlapping[:10]:
            out.append(f"OVERLAP task {first.task_id}: attempt {first.attempt} "
                       f"[{first.start:.3f}, {first.end:.3f}] pid {first.pid} and attempt "
                       f"{second.attempt} [{second.start:.3f}, {second.end:.3f}] pid {second.pid}")
        for run in self.ran_after_finish[:10]:
            out.append(f"RAN AFTER FINISH task {run.task_id} attempt {run.attempt} "
                       f"started {run.start:.3f}")
        out.append(f"delivery latency, all tasks:    {format_ms(self.latency_all)}")
        out.append(f"delivery latency, during faults: {format_ms(self.latency_faults)}")
        if self.full_speed_s:
            out.append("time to full speed after a failover: " + ", ".join(
                "not reached" if s is None else f"{s:.1f}s" for s in self.full_speed_s)
                + (" (not reached: the fleet stayed slower, or the load ended first)"
                   if None in self.full_speed_s else ""))
        return out

    def summary(self) -> str:
        return (f"lost={len(self.lost)} overlapping={len(self.overlapping)} "
                f"ran_after_finish={len(self.ran_after_finish)} "
                f"not_success={sum(self.not_success.values())} tasks={self.tasks} "
                f"reruns={self.reruns} records_missing={self.records_missing} "
                f"faults={self.faults_ok}/{self.faults} crossed={self.faults_crossed} "
                f"p50_ms={self.latency_all.get('p50', 0) * 1000:.0f} "
                f"p99_ms={self.latency_all.get('p99', 0) * 1000:.0f} "
                f"faults_p99_ms={self.latency_faults.get('p99', 0) * 1000:.0f} "
                f"vanished={len(self.vanished)}"
                + (" full_speed_s="
                   + ",".join("-" if s is None else f"{s:.1f}" for s in self.full_speed_s)
                   if self.full_speed_s else ""))


@shards.across(sum)
def unfinished() -> int:
    """Tasks not yet in a final status."""
    return TaskEntity.objects.exclude(status__in=FINAL).count()


@shards.across(_joined)
def _task_rows() -> list[tuple]:
    return list(TaskEntity.objects.values_list("pk", "lambda_ref__name", "collection", "status",
                                               "run_at", "finished_at"))


def check(executions: Sequence[Execution], events: Sequence[FaultEvent],
          dropped: Iterable[str], *, scheduled: int = 0,
          promotions: Sequence[Promotion] = ()) -> Report:
    """Run every check against the store and the recorded executions; `scheduled` tasks were
    acknowledged to the loader, and the database failed over at each of `promotions`."""
    dropped = set(dropped)
    report = Report(faults=len(events), faults_ok=sum(event.ok for event in events),
                    faults_crossed=sum(event.crossed for event in events))
    rows = _task_rows()
    report.tasks = len(rows)
    finished_at = {}
    not_success: dict[str, int] = defaultdict(int)
    in_dropped: dict[str, int] = defaultdict(int)
    for pk, _name, collection, status, _run_at, finished in rows:
        finished_at[pk] = finished
        if status not in FINAL:
            report.lost.append(pk)
        elif collection in dropped:
            in_dropped[status] += 1
        elif status != "success":
            not_success[status] += 1
    report.not_success, report.dropped_collections = dict(not_success), dict(in_dropped)
    report.overlapping = count_overlaps(executions)
    for run in executions:
        finished = finished_at.get(run.task_id)
        if finished is not None and run.start > finished.timestamp():
            report.ran_after_finish.append(run)
    recorded = {run.task_id for run in executions}
    report.reruns = len(executions) - len(recorded)
    report.records_missing = sum(
        1 for pk, name, _c, status, _r, _f in rows
        if name == "demo.record" and status == "success" and pk not in recorded
    )
    _latencies(report, rows, events)
    report.vanished = _vanished(scheduled)
    finished = [at.timestamp() for *_rest, at in rows if at is not None]
    report.full_speed_s = [time_to_full_speed(finished, started=promotion.started,
                                              ended=promotion.promoted)
                           for promotion in promotions]
    return report


def _vanished(scheduled: int) -> list[int]:
    """Numbers of the loader's first `scheduled` tasks whose idempotency key is not stored."""
    keys = _keys()
    stored = {int(key.removeprefix(KEY_PREFIX)) for key in keys}
    return [number for number in range(scheduled) if number not in stored]


@shards.across(_joined)
def _keys() -> list[str]:
    return list(TaskEntity.objects.filter(idempotency_key__startswith=KEY_PREFIX).values_list(
        "idempotency_key", flat=True))


@shards.across(_joined)
def _first_starts() -> list[tuple]:
    """(task id, when its first attempt started): its first attempt row's start, else its own
    `started_at` (a success at the first attempt leaves no attempt row)."""
    first = dict(TaskEntity.objects.filter(started_at__isnull=False)
                 .values_list("pk", "started_at"))
    first.update(TaskAttempt.objects.values("task_id").annotate(first=Min("started_at"))
                 .values_list("task_id", "first"))
    return list(first.items())


def _latencies(report: Report, rows: Sequence[tuple], events: Sequence[FaultEvent]) -> None:
    first_start = dict(_first_starts())
    windows = [(event.started, event.ended + RECOVERY_S) for event in events]
    everything, during = [], []
    for pk, _name, _collection, _status, run_at, _finished in rows:
        started = first_start.get(pk)
        if started is None:
            continue
        latency = max(0.0, (started - run_at).total_seconds())
        everything.append(latency)
        due = run_at.timestamp()
        if any(begin <= due <= end for begin, end in windows):
            during.append(latency)
    report.latency_all = percentiles(everything)
    report.latency_faults = percentiles(during)


def status_counts() -> dict[str, int]:
    return dict(_status_counts())


@shards.across(shards.added)
def _status_counts() -> Counter[str]:
    return Counter(dict(TaskEntity.objects.values_list("status").annotate(n=Count("pk"))))
