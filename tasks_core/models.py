"""The task store: lambdas, collections, task entity + assoc rows, attempts, schedules, workers.

Only `tasks_core.store` changes a task's status; everything else reads.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q

from tasks_core import lambda_options
from tasks_core.gating import Gate, GateState
from tasks_core.states import FINAL, AssocStatus, TaskStatus


def _choices(enum_type: type[Enum]) -> list[tuple[str, str]]:
    return [(member.value, member.value) for member in enum_type]


class Team(models.Model):
    """A product team: owns lambdas; its members see and schedule only those."""

    name = models.CharField(max_length=100, unique=True)
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, related_name="atf_teams", blank=True)

    class Meta:
        permissions = [
            ("view_all_teams", "Can see and act on every team's lambdas and tasks"),
        ]

    def __str__(self) -> str:
        return self.name


class GatedModel(models.Model):
    gate = models.CharField(max_length=16, choices=_choices(GateState), default=GateState.OPEN)
    gate_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True

    @property
    def gate_value(self) -> Gate:
        return Gate(state=GateState(self.gate), until=self.gate_until)


class Lambda(GatedModel):
    """A registered callback. Rows are kept in step with the code registry."""

    name = models.CharField(max_length=200, unique=True)
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="lambdas")
    # The code's value of each option (tasks_core.lambda_options declares them; an operator's
    # override lives in a LambdaOverride row). A task's own timeout wins over timeout_s.
    quota_per_s = lambda_options.column("quota")
    max_attempts = lambda_options.column("max_attempts")
    heartbeat_timeout_s = lambda_options.column("heartbeat_timeout")
    backoff_base_s = lambda_options.column("backoff_base")
    backoff_cap_s = lambda_options.column("backoff_cap")
    timeout_s = lambda_options.column("timeout")
    # Flow control (tasks_core.flow enforces them where a task starts).
    concurrency = lambda_options.column("concurrency")
    rate_per_s = lambda_options.column("rate")
    key_concurrency = lambda_options.column("key_concurrency")
    key_rate_per_s = lambda_options.column("key_rate")
    #: The options the code left to their defaults. Every process reads these from its own
    #: settings (tasks_core.overrides.code_value), not from their columns, which hold what the
    #: last syncing process resolved: processes may differ, and that one must not decide.
    defaulted = models.JSONField(default=list, blank=True)
    #: False once the code no longer registers it (its tasks are kept).
    in_code = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class LambdaOverride(models.Model):
    """An operator's value for one option of a lambda; it wins over the code's value.

    Code syncs write only the Lambda row's own columns, so an override outlives restarts,
    `migrate` and new code. Clearing an override deletes its row.
    """

    lambda_ref = models.ForeignKey(Lambda, on_delete=models.CASCADE, related_name="overrides")
    #: The option's name, as the API and `atf_lambda` spell it (see tasks_core.overrides).
    option = models.CharField(max_length=32)
    value = models.FloatField()
    changed_by = models.CharField(max_length=200)
    changed_at = models.DateTimeField()

    class Meta:
        ordering = ["lambda_ref", "option"]
        constraints = [
            models.UniqueConstraint(fields=["lambda_ref", "option"], name="override_unique_option")
        ]

    def __str__(self) -> str:
        return f"{self.lambda_ref_id}.{self.option} = {self.value:g}"


class Collection(GatedModel):
    """A labelled subset of a lambda's tasks, with its own gate."""

    lambda_ref = models.ForeignKey(Lambda, on_delete=models.CASCADE, related_name="collections")
    name = models.CharField(max_length=100)

    class Meta:
        ordering = ["lambda_ref__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["lambda_ref", "name"], name="collection_unique_name")
        ]

    def __str__(self) -> str:
        return f"{self.lambda_ref.name}/{self.name}"


class TaskEntity(models.Model):
    """One execution of a lambda: everything about it, read by people and workers."""

    #: No index of its own: task_lambda_status starts with it (one index fewer to write on every
    #: insert and every status change). No database constraint: its check locked the lambda's
    #: one row on every insert (a lock record in the WAL, and a shared multixact once several
    #: producers insert at once); a lambda with tasks is still not deleted (PROTECT, by the ORM).
    lambda_ref = models.ForeignKey(Lambda, on_delete=models.PROTECT, related_name="tasks",
                                   db_index=False, db_constraint=False)
    collection = models.CharField(max_length=100, default="default")
    priority = models.CharField(max_length=32)
    payload = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=16, choices=_choices(TaskStatus), default=TaskStatus.NEW)
    attempts = models.PositiveIntegerField(default=0)
    max_attempts = models.PositiveIntegerField()
    run_at = models.DateTimeField()
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)
    #: Seconds one attempt of this task may run; null: its lambda's time limit.
    timeout_s = models.FloatField(null=True, blank=True)
    #: Fencing token: bumped on every enqueue and claim; a stale holder's writes are refused.
    lease = models.BigIntegerField(default=0)
    worker = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField()
    enqueued_at = models.DateTimeField(null=True, blank=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    #: When a cancel asked the worker running the task to stop it (its next heartbeat hears).
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    #: {"type", "message", "traceback"} of the last failure, or why it was cancelled.
    last_error = models.JSONField(null=True, blank=True)
    #: The value its lambda's keyed limits (key_concurrency, key_rate) count it under.
    limit_key = models.CharField(max_length=200, null=True, blank=True)
    #: A later schedule with this key, while this task still waits, replaces it (debounce).
    debounce_key = models.CharField(max_length=200, null=True, blank=True)
    #: When a flow limit last held it back at its start (tasks_core.flow); a finish of its
    #: lambda releases held tasks in priority order.
    held_at = models.DateTimeField(null=True, blank=True)
    #: The group this task is a member of (tasks_core.groups); null for a plain task. No
    #: database constraint: retention deletes tasks and groups apart, in raw batches.
    group = models.ForeignKey("TaskGroup", on_delete=models.DO_NOTHING, null=True, blank=True,
                              related_name="members", db_constraint=False, db_index=False)
    #: Its place among its group's members, from 1 (a member named by its idempotency key
    #: may be older than the group: the members' order is not their ids').
    group_position = models.PositiveIntegerField(null=True, blank=True)
    parents = models.ManyToManyField(
        "self", through="TaskDependency", through_fields=("child", "parent"),
        symmetrical=False, related_name="children", blank=True,
    )

    class Meta:
        verbose_name = "task"
        constraints = [
            models.UniqueConstraint(
                fields=["lambda_ref", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="task_unique_idempotency_key",
            )
        ]
        indexes = [
            # Ids ascending in both status indexes: a row's new entry lands at the right end of
            # its status's range, where PostgreSQL packs the pages it splits (newest first is the
            # same range read backwards).
            models.Index(fields=["lambda_ref", "status", "id"], name="task_lambda_status"),
            # Tasks by status across lambdas, for the statuses a task rests in (new, waiting,
            # retrying, and the endings but success): the drain's path (enqueued, claimed,
            # processing, success) writes no entry here. Tasks in a queue or in flight are
            # found through task_in_queue and task_held, successes newest first by id.
            models.Index(fields=["status", "id"], name="task_status_at_rest",
                         condition=~Q(status__in=["enqueued", "claimed", "processing",
                                                  "success"])),
            # Only finished tasks: the status changes before a task ends write nothing here.
            models.Index(fields=["status", "finished_at"], name="task_status_finished",
                         condition=Q(finished_at__isnull=False)),
            models.Index(fields=["created_at"], name="task_created"),
            # What one worker holds (the worker API's bound on it reads this once per claim):
            # only claimed and processing rows, so its size is the fleet's tasks in flight.
            models.Index(fields=["worker"], name="task_held",
                         condition=Q(status__in=["claimed", "processing"])),
            # The successes a worker ran (?worker= in the API, a worker's console page): a
            # success has no attempt row, whose attempt_worker finds the other attempts.
            models.Index(fields=["worker"], name="task_succeeded_by",
                         condition=Q(status="success")),
            # The queues' age (the oldest task waiting in each <lambda, priority> queue): only
            # enqueued rows, so one probe per queue reads the backlog's first row, not history.
            models.Index(fields=["lambda_ref", "priority", "enqueued_at"], name="task_in_queue",
                         condition=Q(status="enqueued")),
            # Flow control: only tasks a limit holds back, and debounced tasks still waiting,
            # so tasks of lambdas without limits never write these.
            models.Index(fields=["lambda_ref", "priority", "id"], name="task_flow_held",
                         condition=Q(status="new", held_at__isnull=False)),
            models.Index(fields=["lambda_ref", "limit_key", "priority", "id"],
                         name="task_flow_held_key",
                         condition=Q(status="new", held_at__isnull=False)),
            models.Index(fields=["lambda_ref", "debounce_key"], name="task_debounce",
                         condition=Q(debounce_key__isnull=False,
                                     status__in=["new", "enqueued"])),
            # A group's members in order (its counts, its callback's results): members only.
            models.Index(fields=["group", "group_position"], name="task_group_position",
                         condition=Q(group__isnull=False)),
        ]

    def __str__(self) -> str:
        return f"{self.lambda_ref.name} #{self.pk} ({self.status})"

    # The handle `atf.schedule()` and `atf.get()` return: what a caller reads of its task.

    @property
    def lambda_name(self) -> str:
        return self.lambda_ref.name

    @property
    def is_finished(self) -> bool:
        """Whether the task reached a final status (success, fatal_failure, dead, cancelled,
        dropped); a requeue of a dead letter makes it unfinished again."""
        return TaskStatus(self.status) in FINAL

    def refresh(self) -> TaskEntity:
        """Read the task's current row again (status, result, attempts, last_error, ...);
        return the task itself, so that `task.refresh().status` reads."""
        self.refresh_from_db()
        return self


class FlowStart(models.Model):
    """One start of a task of a lambda with a `rate` or `key_rate` (key "" for the lambda's
    own rate): the sliding window's log. Rows older than the window are deleted as the next
    start of the same lambda and key is decided (tasks_core.flow); the consumer deletes those
    older than the longest window, of keys that never start again (tasks_core.flow_starts)."""

    lambda_ref = models.ForeignKey(Lambda, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=200, blank=True, default="")
    at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["lambda_ref", "key", "at"], name="flow_start_window"),
                   models.Index(fields=["at"], name="flow_start_at")]


class TaskGroup(models.Model):
    """Tasks scheduled together (`atf.group`): `then` runs once all of them succeeded,
    `on_failure` once one of them did not. Members end -> the counts here, under this row's
    lock (tasks_core.store.groups)."""

    class Status(models.TextChoices):
        RUNNING = "running"  #: members are still to end
        SUCCEEDED = "succeeded"  #: every member succeeded: `then` was released
        FAILED = "failed"  #: a member did not succeed: `on_failure` was released

    #: The team of its members' lambdas (the first member's), which the API scopes it by.
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="task_groups")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RUNNING)
    total = models.PositiveIntegerField()
    succeeded = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    #: Callbacks: `waiting` tasks until the group ends; the one that does not apply ends
    #: `cancelled`. No database constraint, as for TaskEntity.group.
    then = models.ForeignKey(TaskEntity, on_delete=models.DO_NOTHING, null=True, blank=True,
                             related_name="+", db_constraint=False)
    on_failure = models.ForeignKey(TaskEntity, on_delete=models.DO_NOTHING, null=True,
                                   blank=True, related_name="+", db_constraint=False)
    created_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    #: A second schedule of a group with this key (in its team) returns this group.
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)

    class Meta:
        verbose_name = "task group"
        constraints = [
            models.UniqueConstraint(fields=["team", "idempotency_key"],
                                    condition=Q(idempotency_key__isnull=False),
                                    name="task_group_unique_idempotency_key"),
        ]

    def __str__(self) -> str:
        return f"group #{self.pk} ({self.status})"

    def refresh(self) -> TaskGroup:
        """Read the group's current row again; return the group itself."""
        self.refresh_from_db()
        return self


#: Assoc rows carry shard = task id % SHARDS, for consumers that split the work by shard.
SHARDS = 256


class TaskAssoc(models.Model):
    """The small row the store consumer polls: one per task, out of the index once completed."""

    task = models.OneToOneField(
        TaskEntity, on_delete=models.CASCADE, primary_key=True, related_name="assoc"
    )
    #: No database constraint, as the entity's (the row is inserted with it).
    lambda_ref = models.ForeignKey(Lambda, on_delete=models.PROTECT, related_name="+",
                                   db_index=False, db_constraint=False)
    collection = models.CharField(max_length=100)
    priority = models.CharField(max_length=32)
    status = models.CharField(max_length=16, choices=_choices(AssocStatus), default=AssocStatus.NEW)
    next_trigger_at = models.DateTimeField(null=True)
    shard = models.PositiveSmallIntegerField(default=0)

    class Meta:
        indexes = [
            # The consumer's due rows (and its soonest trigger): per lambda, priority by
            # priority, earliest first; only rows that are not completed, so it stays
            # O(ready rows).
            models.Index(
                fields=["lambda_ref", "priority", "next_trigger_at"],
                condition=~Q(status=AssocStatus.COMPLETED),
                name="assoc_lambda_priority_due",
            ),
        ]


class OutcomeMinute(models.Model):
    """How many of a lambda's tasks reached a final status in one minute: the rollup that the
    counts and the throughput read instead of the task history (tasks_core.outcomes)."""

    lambda_ref = models.ForeignKey(Lambda, on_delete=models.CASCADE, related_name="+",
                                   db_index=False)
    status = models.CharField(max_length=16, choices=[(s.value, s.value) for s in sorted(FINAL)])
    minute = models.DateTimeField()
    finished = models.BigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["lambda_ref", "status", "minute"],
                                               name="outcome_minute_unique")]
        indexes = [models.Index(fields=["minute"], name="outcome_minute")]


class LatencyMinute(models.Model):
    """The delivery latencies of a lambda's first attempts that started in one minute, counted
    per bucket of a log scale (tasks_core.latency_buckets): folded with the outcomes, so that
    the latency percentiles read a row per lambda and minute, not the tasks."""

    lambda_ref = models.ForeignKey(Lambda, on_delete=models.CASCADE, related_name="+",
                                   db_index=False)
    minute = models.DateTimeField()
    #: Bucket index (as text) -> first attempts whose latency fell in it.
    buckets = models.JSONField(default=dict)
    #: The sum of their latencies in seconds (the Prometheus histogram's sum).
    sum_s = models.FloatField(default=0.0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["lambda_ref", "minute"],
                                               name="latency_minute_unique")]
        indexes = [models.Index(fields=["minute"], name="latency_minute")]


class OutcomeTotal(models.Model):
    """How many of a lambda's tasks ever reached a final status: never less after a prune."""

    lambda_ref = models.ForeignKey(Lambda, on_delete=models.CASCADE, related_name="+",
                                   db_index=False)
    status = models.CharField(max_length=16, choices=[(s.value, s.value) for s in sorted(FINAL)])
    finished = models.BigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["lambda_ref", "status"],
                                               name="outcome_total_unique")]


class OutcomeFold(models.Model):
    """The one row that says how far the rollup reaches: tasks that finished before
    `folded_until` are in OutcomeMinute, OutcomeTotal and LatencyMinute, later ones only in the
    task table."""

    folded_until = models.DateTimeField()


class TaskDependency(models.Model):
    """`child` waits until `parent` succeeded (chains)."""

    parent = models.ForeignKey(TaskEntity, on_delete=models.CASCADE, related_name="+")
    child = models.ForeignKey(TaskEntity, on_delete=models.CASCADE, related_name="+")

    class Meta:
        verbose_name_plural = "task dependencies"
        constraints = [
            models.UniqueConstraint(fields=["parent", "child"], name="dependency_unique_pair")
        ]
        indexes = [models.Index(fields=["child"], name="dependency_child")]


class TaskStep(models.Model):
    """The recorded result of one step of a task (`ctx.step(name, ...)`): written under the
    lease of the attempt that ran it, and returned, without running it again, to every later
    attempt of the task."""

    #: No database constraint: retention deletes a task's steps with it, in raw batches.
    task = models.ForeignKey(TaskEntity, on_delete=models.DO_NOTHING, related_name="steps",
                             db_constraint=False, db_index=False)
    name = models.CharField(max_length=200)
    result = models.JSONField(null=True, blank=True)
    #: Bytes of the result's JSON text: a task's steps count against ATF_MAX_RESULT_BYTES.
    size = models.PositiveIntegerField()
    attempt = models.PositiveIntegerField()  #: the attempt that ran it
    recorded_at = models.DateTimeField()

    class Meta:
        ordering = ["task", "id"]
        constraints = [models.UniqueConstraint(fields=["task", "name"], name="step_unique_name")]


class TaskProgress(models.Model):
    """How far a running task says it got (`ctx.progress`): one row per task that reported,
    written at most once a second."""

    task = models.OneToOneField(TaskEntity, on_delete=models.DO_NOTHING, primary_key=True,
                                related_name="progress", db_constraint=False)
    done = models.FloatField()
    total = models.FloatField(null=True, blank=True)
    note = models.CharField(max_length=200, blank=True, default="")
    updated_at = models.DateTimeField()


class TaskTrace(models.Model):
    """The W3C trace context a task was scheduled in (tasks_core.tracing): written only where
    tracing is on, read by the workers that trace its attempts."""

    task = models.OneToOneField(TaskEntity, on_delete=models.DO_NOTHING, primary_key=True,
                                related_name="trace", db_constraint=False)
    traceparent = models.CharField(max_length=55)
    tracestate = models.CharField(max_length=512, blank=True, default="")


class TaskAttempt(models.Model):
    """One attempt at a task, so a person can see why it was retried."""

    class Outcome(models.TextChoices):
        SUCCESS = "success"
        FATAL = "fatal"
        RETRY = "retry"
        DEAD = "dead"
        LOST = "lost"  #: its executor vanished (killed, cut off); found by the consumer
        TIMEOUT = "timeout"  #: it ran past its time limit
        CANCELLED = "cancelled"  #: a cancel stopped it while it ran

    #: No index of its own: attempt_task_number starts with it (one index entry fewer a row).
    #: No database constraint: an attempt is written by the statement that holds its task's row
    #: (claim, finish), and retention deletes a task's attempts before the task; the check cost
    #: a query per attempt written and per task pruned.
    task = models.ForeignKey(TaskEntity, on_delete=models.CASCADE, related_name="attempt_history",
                             db_index=False, db_constraint=False)
    number = models.PositiveIntegerField()
    worker = models.CharField(max_length=200, blank=True, default="")
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField()
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    error = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["task", "number"]
        indexes = [
            models.Index(fields=["task", "number"], name="attempt_task_number"),
            # The tasks a worker ran (?worker= in the API, a worker's console page).
            models.Index(fields=["worker"], name="attempt_worker"),
            # /metrics counts recent lost attempts (heartbeat losses) on every scrape.
            models.Index(fields=["ended_at"], name="attempt_lost_ended",
                         condition=models.Q(outcome="lost")),
        ]


class PeriodicTask(models.Model):
    """A schedule that the consumer turns into ordinary tasks, one per occurrence."""

    class CatchUp(models.TextChoices):
        ONCE = "once"  #: after downtime, run the missed occurrences once
        SKIP = "skip"  #: after downtime, skip to the next future occurrence

    #: Unique within its team: another team's names are neither taken nor told.
    name = models.CharField(max_length=200)
    lambda_ref = models.ForeignKey(Lambda, on_delete=models.CASCADE, related_name="periodic_tasks")
    #: Its lambda's team, kept on the row (set when it is saved) for the names and the limits.
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="periodic_tasks")
    cron = models.CharField(max_length=100, blank=True, default="")
    interval_s = models.FloatField(null=True, blank=True)
    timezone = models.CharField(max_length=64, default="UTC")
    payload = models.JSONField(default=dict, blank=True)
    collection = models.CharField(max_length=100, default="default")
    priority = models.CharField(max_length=32, default="default")
    catch_up = models.CharField(max_length=8, choices=CatchUp.choices, default=CatchUp.ONCE)
    enabled = models.BooleanField(default=True)
    #: Defined by code (`atf.register(..., schedule=)`), as opposed to the console.
    in_code = models.BooleanField(default=False)
    next_run_at = models.DateTimeField(null=True, blank=True)
    last_run_at = models.DateTimeField(null=True, blank=True)
    #: Why its last materialisation failed (empty once it succeeds): shown to its team.
    last_error = models.CharField(max_length=500, blank=True, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["team", "name"], name="periodic_unique_name_per_team")
        ]

    def __str__(self) -> str:
        return self.name

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.team_id is None and self.lambda_ref_id is not None:
            self.team_id = Lambda.objects.values_list("team_id", flat=True).get(
                pk=self.lambda_ref_id)
        super().save(*args, **kwargs)


class Worker(models.Model):
    """A running `runworker` process, for the console and the API."""

    worker_id = models.CharField(max_length=200, unique=True)
    host = models.CharField(max_length=200)
    pid = models.PositiveIntegerField()
    lambdas = models.JSONField(default=list)
    threads = models.PositiveIntegerField(default=1)
    started_at = models.DateTimeField()
    last_seen = models.DateTimeField()
    stopped_at = models.DateTimeField(null=True, blank=True)
    #: Who registered it: a remote worker's token ("token:<id>"), empty for a direct worker.
    #: Only that credential may act as this worker, or on the leases of its claims.
    credential = models.CharField(max_length=64, blank=True, default="")

    class Meta:
        ordering = ["-last_seen"]

    def __str__(self) -> str:
        return self.worker_id
