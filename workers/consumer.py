"""The store consumer: turns due assoc rows into queue messages, and brings back lost tasks.

One pass visits every lambda in turn (round-robin, starting one further each pass, lambdas
the last pass left due rows of after the others) and takes
at most a fair share of the batch and what the lambda's quota allows, so a lambda with a
million due tasks does not delay another lambda's next task. Shares are split by team first,
then among the team's lambdas: a team with a thousand busy lambdas takes no more of a pass
than a team with one. While several teams have due tasks, shares are taken in slices, and a
task scheduled to run now ends the pass after the slice in progress (SLICE_ROWS); the look for
due periodic occurrences has a time budget and a share of the loop's time (PERIODIC_BUDGET_S,
PERIODIC_SHARE), so no team's schedules hold the passes. Between passes it sleeps until
the next trigger is due, a wake-up arrives, or the poll interval ends, whichever is first.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import InterfaceError, OperationalError
from django.db.models import OuterRef, QuerySet, Subquery
from django.utils import timezone

from tasks_core import (
    consumer_liveness,
    flow_starts,
    gating,
    outcomes,
    overrides,
    periodic,
    queues,
    quota,
    retention,
    shards,
    store,
    wakeup,
    worker_registry,
)
from tasks_core.conf import atf_settings
from tasks_core.exceptions import QueueUnavailable
from tasks_core.models import Collection, Lambda, TaskAssoc
from tasks_core.states import AssocStatus
from workers import compiled_query, db, turns
from workers.compiled_query import CompiledQuery
from workers.outages import OutageLog

logger = logging.getLogger(__name__)

#: Seconds between two housekeeping rounds (gates reopened, dead workers marked).
HOUSEKEEPING_INTERVAL_S = 1.0
#: Seconds between two looks for due periodic occurrences (not every pass of a busy loop).
PERIODIC_INTERVAL_S = 0.1
#: Seconds one look for due periodic occurrences may take before it leaves the rest for the
#: next: however many occurrences one team's schedules make, the passes that enqueue every
#: team's due tasks come again after this long.
PERIODIC_BUDGET_S = 0.05
#: The looks for periodic occurrences take at most this share of the loop's time: a look that
#: took longer than PERIODIC_INTERVAL_S allows (a busy database) puts the next one off.
PERIODIC_SHARE = 0.2
#: While more than one team has due rows (each seen within SHARED_S seconds), a lambda's share
#: of a pass is enqueued SLICE_ROWS at a time, and a wake-up (a task scheduled to run now) ends
#: the pass after the slice in progress: the next pass, at once, serves the lambdas without a
#: backlog first, so another team's new task waits for one slice of a backlog, not a share.
SLICE_ROWS = 50
SHARED_S = 1.0
#: Finished tasks pruned per transaction (small, so no lock is held long); a housekeeping
#: round prunes batch after batch for up to retention.PRUNE_BUDGET_S seconds.
PRUNE_BATCH_SIZE = 500
#: Seconds per housekeeping round at most for the rate limits' start log (tasks_core.flow_starts).
FLOW_STARTS_BUDGET_S = 0.1
#: Seconds between two summary lines at INFO.
SUMMARY_INTERVAL_S = 10.0
#: Longest wait between two passes while a shard's database cannot be reached: the wait
#: starts at ATF_RESTART_DELAY_S and doubles up to this (one database: each second).
RETRY_MOST_S = 5.0


@dataclass(kw_only=True)
class PassSummary:
    """What one pass did, for logging and for tests."""

    enqueued: int = 0
    reenqueued: Counter = field(default_factory=Counter)  #: by the status that expired
    dropped: int = 0
    dead: int = 0
    push_failed: int = 0
    busy: bool = False  #: some lambda had more due rows than it was given this pass

    def add(self, other: PassSummary) -> None:
        self.enqueued += other.enqueued
        self.reenqueued.update(other.reenqueued)
        self.dropped += other.dropped
        self.dead += other.dead
        self.push_failed += other.push_failed

    @property
    def total(self) -> int:
        return self.enqueued + self.dropped + self.dead


@dataclass(frozen=True, kw_only=True)
class _LambdaGates:
    lambda_id: int
    name: str
    team_id: int
    gate: gating.Gate
    quota_per_s: float | None
    collections: dict[str, gating.Gate]
    has_due: bool  #: some row of the lambda was due when the gates were read

    def decide(self, collection: str, now: datetime) -> gating.Decision:
        return gating.decide(self.gate, self.collections.get(collection, gating.OPEN), now)

    def paused_collections(self, now: datetime) -> list[str]:
        return [name for name in self.collections
                if self.decide(name, now) is gating.Decision.POSTPONE]


def _lambda_gates_query() -> QuerySet:
    """Each lambda's id, name, gate, gate_until and quota in effect, and per priority the id
    of its newest row due at compiled_query.NOW, or None (one probe of the (lambda, priority,
    trigger) index each).

    The probe reads the index backwards, from NOW: rows are enqueued oldest first, so the
    entries a drain leaves dead (rows since enqueued or finished, kept until no snapshot can
    see them) lie at the old end. Read forwards, each pass walked all of them before the first
    live row (13,000 buffers a probe in a 60,000-task drain)."""
    due = TaskAssoc.objects.filter(
        lambda_ref_id=OuterRef("pk"), next_trigger_at__lte=compiled_query.NOW
    ).exclude(status=AssocStatus.COMPLETED)
    probes = {f"due_{rank}": Subquery(due.filter(priority=priority)
                                      .order_by("-next_trigger_at").values("pk")[:1])
              for rank, priority in enumerate(atf_settings.priorities)}
    return (Lambda.objects.order_by("pk")
            .annotate(quota=overrides.effective_expression("quota"), **probes)
            .values_list("pk", "name", "team_id", "gate", "gate_until", "quota", *probes))


def _soonest_triggers() -> dict[str, Subquery]:
    """Per priority, a lambda's soonest trigger (one probe of the (lambda, priority, trigger)
    index each: there is no index of triggers across lambdas for every transition to write)."""
    rows = TaskAssoc.objects.filter(lambda_ref_id=OuterRef("pk")).exclude(
        status=AssocStatus.COMPLETED).exclude(next_trigger_at=None)
    return {f"soonest_{rank}": Subquery(rows.filter(priority=priority)
                                        .order_by("next_trigger_at").values("next_trigger_at")[:1])
            for rank, priority in enumerate(atf_settings.priorities)}


def _team_shares(lambdas: list[_LambdaGates], batch_size: int) -> dict[int, int]:
    """Each team's share of the batch for each of its lambdas with due rows: the batch split
    evenly among the teams, then among each team's lambdas (at least one row each)."""
    lambdas_of = Counter(lam.team_id for lam in lambdas)
    per_team = batch_size / len(lambdas_of)
    return {team_id: max(1, int(per_team // count)) for team_id, count in lambdas_of.items()}


def _next_periodic_look(started_s: float, ended_s: float) -> float:
    """Monotonic time of the next look for periodic occurrences after one from `started_s`
    to `ended_s`: PERIODIC_INTERVAL_S after it began, or later so that looks take at most
    PERIODIC_SHARE of the time."""
    return max(started_s + PERIODIC_INTERVAL_S,
               ended_s + (ended_s - started_s) * (1 - PERIODIC_SHARE) / PERIODIC_SHARE)


def _short_first(lambdas: list[_LambdaGates], backlogged: set[int]) -> list[_LambdaGates]:
    """The pass's order: lambdas the last pass emptied first, then those it left due rows of
    (each group in its round-robin order). A lambda with a few new tasks then waits for no
    backlogged lambda's batch in this pass, and a backlogged one still gets its share."""
    return ([lam for lam in lambdas if lam.lambda_id not in backlogged]
            + [lam for lam in lambdas if lam.lambda_id in backlogged])


class ControlChores:
    """The control database's chores, which a consumer process does once whatever its number of
    shard loops: reopening gates whose time ran out and marking workers not seen (a round each
    HOUSEKEEPING_INTERVAL_S), and looking for due periodic occurrences (tasks that go to
    whichever shard placement picks). The loops of a process share one; whichever comes first
    takes a chore, so a loop whose shard is down (it never gets past its pass) leaves them to
    the others. Each loop doing them made control's writes grow with the shards."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._housekept_s = -math.inf  #: monotonic time of the last round taken
        self._periodic_due_s = 0.0  #: monotonic time of the next look for periodic tasks

    def take_housekeeping(self, now_s: float) -> bool:
        """Whether the loop asking at monotonic time `now_s` does this round of them."""
        with self._lock:
            if now_s - self._housekept_s < HOUSEKEEPING_INTERVAL_S:
                return False
            self._housekept_s = now_s
            return True

    @contextlib.contextmanager
    def periodic_look(self) -> Iterator[bool]:
        """Whether the loop looks for periodic occurrences now: not while another loop looks,
        nor before the next look is due (_next_periodic_look)."""
        with self._lock:
            started_s = time.monotonic()
            mine = started_s >= self._periodic_due_s
            if mine:
                self._periodic_due_s = math.inf  # until this look ends
        try:
            yield mine
        finally:
            if mine:
                with self._lock:
                    self._periodic_due_s = _next_periodic_look(started_s, time.monotonic())


class Consumer:
    """The consumer's loop over one shard's due rows; `run_pass()` is one pass, for tests and
    for `run()`. `chores`: the control database's chores it shares with the other loops of its
    process (ShardConsumers), whichever takes each first; by default its own."""

    def __init__(self, *, batch_size: int, poll_interval_s: float,
                 queue: queues.QueueBackend | None = None,
                 clock: Callable[[], datetime] = timezone.now,
                 lambda_turn: Callable[[int], contextlib.AbstractContextManager[bool]]
                 = turns.lambda_turn, shard: str | None = None,
                 chores: ControlChores | None = None) -> None:
        self.shard = shard or shards.aliases()[0]
        #: The shard's slot: its tasks go to the queues of that slot (QueueBackend.queue_name).
        self.slot = shards.aliases().index(self.shard)
        self.chores = chores or ControlChores()
        self.batch_size = batch_size
        self.poll_interval_s = poll_interval_s
        self.queue = queue or queues.backend()
        #: What the consumer says while pushes to the queues fail.
        self.pushes = OutageLog(logger, "push tasks to the queues")
        #: What the consumer says while its shard's database cannot be reached.
        self.outage = OutageLog(logger, f"reach the database of shard {self.shard}"
                                if shards.sharded() else "reach the database")
        self.clock = clock
        self.lambda_turn = lambda_turn  #: how a pass takes its turn on a lambda (workers.turns)
        self.running = True
        self.wake = threading.Event()
        self._quotas = quota.Quotas()
        self._turn = 0
        self._backlogged: set[int] = set()  #: lambdas the last pass left due rows of
        self._teams_seen_s: dict[int, float] = {}  #: teams with due rows: when last seen
        self._housekept_s = 0.0
        #: The last round of retention left tasks past it (see `_prune`).
        self.retention_behind = False
        self._paused: list[int] = []  #: lambdas whose gate the last pass found paused
        self._pass_now = clock()  #: the time the last pass looked for due rows at
        # The queries of every pass, compiled once.
        self._collection_gates = CompiledQuery(
            Collection.objects.exclude(gate=gating.GateState.OPEN)
            .values_list("lambda_ref_id", "name", "gate", "gate_until"))
        self._lambda_gates = CompiledQuery(_lambda_gates_query())

    # --- one pass --------------------------------------------------------------------------

    def _gates(self, now: datetime) -> list[_LambdaGates]:
        """Every lambda's gates and quota, and whether it has a row due (one index probe each),
        in two queries."""
        collections: dict[int, dict[str, gating.Gate]] = defaultdict(dict)
        for lambda_id, name, state, until in self._collection_gates.rows():
            collections[lambda_id][name] = gating.Gate(state=gating.GateState(state), until=until)
        return [
            _LambdaGates(lambda_id=pk, name=name, team_id=team_id,
                         gate=gating.Gate(state=gating.GateState(state), until=until),
                         quota_per_s=quota, collections=collections[pk],
                         has_due=any(row_id is not None for row_id in newest_due))
            for pk, name, team_id, state, until, quota, *newest_due
            in self._lambda_gates.rows(now)
        ]

    def _limit(self, lam: _LambdaGates, share: int, now_s: float) -> int:
        """The lambda's share of this pass, within its quota (fleet-wide: tasks_core.quota)."""
        if lam.quota_per_s is None:
            return share
        return self._quotas.take(lam.lambda_id, lam.quota_per_s, share, now_s)

    def run_pass(self) -> PassSummary:
        """Enqueue, re-enqueue, drop or dead-letter what is due now, fairly across lambdas."""
        with shards.using(self.shard):
            return self._pass()

    def _pass(self) -> PassSummary:
        # Cleared before the clock and the gates are read: a wake-up from then on is for a
        # task this pass may not see, so it cuts the pass short (SLICE_ROWS) and the sleep
        # after it is skipped.
        self.wake.clear()
        now = self._pass_now = self.clock()
        summary = PassSummary()
        lambdas = self._gates(now)
        self._paused = [lam.lambda_id for lam in lambdas
                        if gating.effective(lam.gate, now) is gating.GateState.PAUSED]
        # A pass spends a transaction only on lambdas with due rows, and shares the batch
        # among them alone.
        lambdas = [lam for lam in lambdas if lam.has_due and lam.lambda_id not in self._paused]
        if not lambdas:
            return summary
        self._turn = (self._turn + 1) % len(lambdas)
        shares = _team_shares(lambdas, self.batch_size)
        now_s = now.timestamp()
        backlogged, self._backlogged = self._backlogged, set()
        slice_rows = SLICE_ROWS if self._shared({lam.team_id for lam in lambdas}, now_s) else None
        cut = False
        for lam in _short_first(lambdas[self._turn:] + lambdas[: self._turn], backlogged):
            if cut:  # its turn comes in the next pass, which starts at once, in its place
                if lam.lambda_id in backlogged:
                    self._backlogged.add(lam.lambda_id)
                continue
            limit = self._limit(lam, shares[lam.team_id], now_s)
            if limit <= 0:
                continue
            handled = 0
            with self.lambda_turn(lam.lambda_id) as mine:
                if mine:  # else another consumer is enqueueing this lambda right now
                    done, handled, cut = self._enqueue(lam, limit, now, slice_rows)
            if lam.quota_per_s is not None:  # the quota's tokens this pass did not use
                self._quotas.give_back(lam.lambda_id, lam.quota_per_s, limit - handled)
            if not mine:
                continue
            if handled >= limit or cut:
                summary.busy = True
                self._backlogged.add(lam.lambda_id)
            summary.add(done)
            if handled:
                logger.debug("%s: enqueued %d, re-enqueued %s, dropped %d, dead %d", lam.name,
                             done.enqueued, dict(done.reenqueued), done.dropped, done.dead)
        return summary

    def _shared(self, teams: set[int], now_s: float) -> bool:
        """Whether more than one team had due rows within SHARED_S (this pass's included)."""
        for team_id in teams:
            self._teams_seen_s[team_id] = now_s
        for team_id, seen_s in list(self._teams_seen_s.items()):
            if now_s - seen_s > SHARED_S:
                del self._teams_seen_s[team_id]
        return len(self._teams_seen_s) > 1

    def _enqueue(self, lam: _LambdaGates, limit: int, now: datetime,
                 slice_rows: int | None) -> tuple[PassSummary, int, bool]:
        """Up to `limit` due rows of `lam` enqueued (or dropped, or dead-lettered), in slices
        of `slice_rows` (None: one) of which none is begun after a wake-up came: what was
        done, how many rows were handled, and whether a wake-up cut the rest."""
        done, handled = PassSummary(), 0
        while handled < limit:
            size = limit - handled if slice_rows is None else min(slice_rows, limit - handled)
            batch = store.enqueue_due(lam.lambda_id, limit=size, now=now,
                                      skip_collections=lam.paused_collections(now),
                                      decide=functools.partial(lam.decide, now=now))
            part = PassSummary(
                enqueued=len(batch.messages) - sum(batch.reenqueued.values()),
                reenqueued=Counter(batch.reenqueued), dropped=batch.dropped, dead=batch.dead,
                push_failed=self._push(lam.name, batch.messages, now))
            done.add(part)
            got = len(batch.messages) + batch.dropped + batch.dead
            handled += got
            if got < size:  # the lambda has no more due rows
                break
            if slice_rows is not None and handled < limit and self.wake.is_set():
                return done, handled, True
        return done, handled, False

    def _push(self, lambda_name: str, messages: list[tuple[str, queues.Message]],
              now: datetime) -> int:
        # `messages` come highest priority first, so the high queue is pushed first: a worker
        # blocked on the lambda's queues wakes up to a high-priority task.
        by_queue: dict[str, list[queues.Message]] = defaultdict(list)
        for priority, message in messages:
            by_queue[self.queue.queue_name(lambda_name, priority, self.slot)].append(message)
        failed = 0
        for queue_name, batch in by_queue.items():
            try:
                self.queue.push(queue_name, batch)
            except QueueUnavailable as exc:
                # The store already says "enqueued"; bring the trigger forward so the tasks
                # are pushed again as soon as the queue is back, not after the enqueue timeout.
                # (The summary every few seconds counts them: "push failures".)
                self.pushes.failed(exc)
                store.retrigger(batch, at=now + timedelta(seconds=atf_settings.restart_delay_s))
                failed += len(batch)
            else:
                self.pushes.succeeded()
        return failed

    # --- housekeeping ----------------------------------------------------------------------

    def housekeep(self, now: datetime, *, control: bool = True) -> None:
        """With `control`, reopen gates whose `until` passed and mark workers that stopped
        being seen; fold the tasks of its shard that finished into the rollup of outcomes;
        prune its finished tasks past their retention, and the rate limits' starts that no
        window counts any more, batch after batch within a time budget each."""
        with shards.using(self.shard):
            if control:
                self._control_housekeeping(now)
            self._shard_housekeeping(now)

    @staticmethod
    def _control_housekeeping(now: datetime) -> None:
        for model in (Lambda, Collection):
            reopened = model.objects.exclude(gate=gating.GateState.OPEN).filter(
                gate_until__lte=now
            ).update(gate=gating.GateState.OPEN, gate_until=None)
            if reopened:
                logger.info("reopened %d %s gate(s) whose time ran out", reopened,
                            model._meta.verbose_name)
                shards.mirror()  # every shard's claims read the gate from their own copy
        gone = worker_registry.mark_gone(now=now, unseen_s=atf_settings.worker_stale_s)
        if gone:
            logger.info("marked %d worker(s) gone (not seen for %ss)", gone,
                        atf_settings.worker_stale_s)

    def _shard_housekeeping(self, now: datetime) -> None:
        outcomes.fold(now=now)
        if pruned := self._prune(now):
            logger.info("pruned %d finished task(s) past their retention", pruned)
        flow_starts.prune(budget_s=FLOW_STARTS_BUDGET_S, batch_size=PRUNE_BATCH_SIZE)

    def _prune(self, now: datetime) -> int:
        """One round of retention within its budget; notes whether tasks past the retention
        are left (`retention_behind`: the loop then prunes again after each pass instead of
        sleeping, until it has caught up)."""
        pruned = retention.prune(now=now, budget_s=retention.PRUNE_BUDGET_S,
                                 batch_size=PRUNE_BATCH_SIZE)
        # A round that pruned less than a batch ran out of tasks, not of time: no probe.
        self.retention_behind = pruned >= PRUNE_BATCH_SIZE and retention.behind(now=now)
        return pruned

    def catch_up_retention(self) -> None:
        """Another round of retention, on the loop's shard, between two passes."""
        with shards.using(self.shard):
            pruned = self._prune(self.clock())
        logger.debug("pruned %d more finished task(s) past their retention", pruned)

    # --- the loop --------------------------------------------------------------------------

    def _next_trigger(self) -> datetime | None:
        """The soonest trigger on the loop's shard of a lambda the last pass found not paused
        (read from the shard's own copy of the lambdas, so that the probes read its tasks)."""
        triggers = _soonest_triggers()
        soonest = (Lambda.objects.using(self.shard).exclude(pk__in=self._paused)
                   .annotate(**triggers).values_list(*triggers))
        return min((trigger for row in soonest for trigger in row if trigger is not None),
                   default=None)

    def seconds_to_sleep(self, summary: PassSummary) -> float:
        """How long to sleep after a pass: until the next trigger is due, or the poll interval,
        whichever is sooner; 0 (or less) when something may be due already."""
        if summary.busy or summary.total:
            return 0.0
        with shards.using(self.shard):
            soonest = self._next_trigger()
        if soonest is None or soonest <= self._pass_now:
            # A trigger the pass saw due and left is one a paused collection or a quota holds
            # back: it waits for the poll.
            return self.poll_interval_s
        # Due after the pass began (perhaps already): sleep exactly until then.
        return min(self.poll_interval_s, (soonest - self.clock()).total_seconds())

    def _sleep(self, summary: PassSummary) -> None:
        """Sleep as long as seconds_to_sleep() says, or until a wake-up comes; not at all while
        retention is behind (the next round of it comes after the next pass)."""
        wait_s = 0.0 if self.retention_behind else self.seconds_to_sleep(summary)
        if wait_s > 0 and self.wake.wait(wait_s):
            self.wake.clear()

    def run(self) -> None:
        listener = wakeup.Listener(self.wake, self.shard)
        listener.start()
        totals = PassSummary()
        logged_s = time.monotonic()
        delay_s = atf_settings.restart_delay_s
        while self.running:
            try:
                # The pass comes first: after a wake-up, due tasks should not wait for chores.
                summary = self.run_pass()
                self.outage.succeeded()
                delay_s = atf_settings.restart_delay_s
                totals.add(summary)
                if time.monotonic() - self._housekept_s >= HOUSEKEEPING_INTERVAL_S:
                    consumer_liveness.passed(self._pass_now)
                    self.housekeep(self.clock(),
                                   control=self.chores.take_housekeeping(time.monotonic()))
                    self._housekept_s = time.monotonic()
                elif self.retention_behind:
                    self.catch_up_retention()
                # Periodic occurrences become ordinary tasks, due at their own time (a task due
                # now wakes the next pass).
                with self.chores.periodic_look() as mine:
                    if mine:
                        periodic.materialise_due(now=self.clock(), budget_s=PERIODIC_BUDGET_S,
                                                 cut=self.wake.is_set)
                if time.monotonic() - logged_s >= SUMMARY_INTERVAL_S:
                    self._log_summary(totals, time.monotonic() - logged_s)
                    totals, logged_s = PassSummary(), time.monotonic()
                self._sleep(summary)
            except Exception as exc:
                if isinstance(exc, OperationalError | InterfaceError):
                    # The database restarts, fails over or is cut off: a line when that starts
                    # and one a minute while it lasts (no traceback), tries further apart
                    # (each shard's loop its own: the other shards' go on meanwhile), until a
                    # pass finds it (or the new primary) again.
                    self.outage.failed((str(exc).splitlines() or [repr(exc)])[0])
                else:
                    logger.exception("consumer loop failed", extra={"action": "consumer_restart"})
                db.reset_connection()
                self.wake.wait(delay_s)
                if shards.sharded():
                    delay_s = min(delay_s * 2, RETRY_MOST_S)
        listener.stop()
        turns.reset()
        db.reset_connection()  # a thread that ends lets go of its connection
        self.queue.close()

    @staticmethod
    def _log_summary(totals: PassSummary, elapsed_s: float) -> None:
        logger.info(
            "last %.0fs: enqueued %d, re-enqueued %d %s, dropped %d, dead %d, push failures %d",
            elapsed_s, totals.enqueued, sum(totals.reenqueued.values()),
            dict(totals.reenqueued), totals.dropped, totals.dead, totals.push_failed,
        )

    def stop(self) -> None:
        self.running = False
        self.wake.set()



def from_settings(*, batch_size: int | None = None, poll_interval_s: float | None = None,
                  queue: queues.QueueBackend | None = None,
                  shard: str | None = None, chores: ControlChores | None = None) -> Consumer:
    """A consumer of `shard` (default: slot 0's) as the settings configure it, its
    code-defined schedules synced to the store (the lambdas must be synced already)."""
    periodic.sync_code_schedules()
    return Consumer(batch_size=batch_size or atf_settings.consumer_batch_size,
                    poll_interval_s=poll_interval_s or atf_settings.poll_interval_s, queue=queue,
                    shard=shard, chores=chores)


class ShardConsumers:
    """One consumer per shard, each running its own pass loop in a thread of its own (one
    shard: the caller's thread, as without shards), sharing the control database's chores."""

    def __init__(self, aliases: Sequence[str], *, batch_size: int | None = None,
                 poll_interval_s: float | None = None,
                 queue: queues.QueueBackend | None = None) -> None:
        chores = ControlChores()
        self.consumers = [from_settings(batch_size=batch_size, poll_interval_s=poll_interval_s,
                                        queue=queue, shard=alias, chores=chores)
                          for alias in aliases]
        self.poll_interval_s = self.consumers[0].poll_interval_s
        self.batch_size = self.consumers[0].batch_size

    def run(self) -> None:
        if len(self.consumers) == 1:
            self.consumers[0].run()
            return
        threads = [threading.Thread(target=consumer.run, name=f"Consumer-{consumer.shard}",
                                    daemon=True) for consumer in self.consumers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def stop(self) -> None:
        for consumer in self.consumers:
            consumer.stop()


#: Seconds a stopping process waits for its consumer thread's pass to end.
THREAD_STOP_S = 10.0


@contextlib.contextmanager
def in_thread(consumer: Consumer | ShardConsumers) -> Iterator[None]:
    """Run `consumer` in a thread of this process for the block (`runworker --with-consumer`);
    stop it when the block ends."""
    thread = threading.Thread(target=consumer.run, name="ConsumerThread", daemon=True)
    thread.start()
    logger.info("consumer started in this process: poll interval %ss, batch size %d",
                consumer.poll_interval_s, consumer.batch_size)
    try:
        yield
    finally:
        consumer.stop()
        thread.join(THREAD_STOP_S)
