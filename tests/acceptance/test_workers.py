"""Workers end to end: real consumer and worker processes on real PostgreSQL and Redis.

Short timeouts make recovery quick: heartbeats every second, a task without one for five
seconds is enqueued again.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import redis
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from tasks_api.models import ApiToken, Scope
from tasks_core import atf, scheduling, stats
from tasks_core.models import TaskAttempt, TaskEntity, TaskStep, Worker
from tests.attempts import attempts_of
from tests.conftest import ROOT, Processes, subprocess_env, wait_for
from tests.proxy import Proxy
from tests.remote import Workers, start_api, worker_env, worker_token

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

FAST = {
    "ATF_HEARTBEAT_INTERVAL_S": "1",
    "ATF_HEARTBEAT_TIMEOUT_S": "5",
    "ATF_ENQUEUE_TIMEOUT_S": "5",
    "ATF_CLAIM_TIMEOUT_S": "60",  # long: a test sees a task handed back, not timed out
    "ATF_POLL_INTERVAL_S": "0.2",
    "ATF_SHUTDOWN_GRACE_S": "20",
}


@pytest.fixture
def env(database_route: str) -> dict[str, str]:
    """The processes' environment; the tests marked `pooled` run through PgBouncer too."""
    return subprocess_env(**FAST)


@pytest.fixture(params=["direct", "remote"])
def workers(request: pytest.FixtureRequest, processes: Processes, env: dict[str, str],
            transactional_db: None) -> Workers:
    """Worker processes of each kind: the guarantees hold for both transports."""
    return Workers(request.param, processes, env)


@pytest.fixture
def records(redis_client: redis.Redis) -> Iterator[callable]:
    def read(key: str = "demo:records") -> list[dict]:
        return [json.loads(line) for line in redis_client.lrange(key, 0, -1)]

    yield read


def statuses() -> Counter[str]:
    return Counter(TaskEntity.objects.values_list("status", flat=True))


def all_final(count: int) -> bool:
    return sum(statuses()[s] for s in ("success", "fatal_failure", "dead")) >= count


def overlapping(lines: list[dict]) -> list[int]:
    """Task ids with two recorded executions whose [start, end] intervals overlap."""
    by_task: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for line in lines:
        by_task[line["task_id"]].append((line["start"], line["end"]))
    bad = []
    for task_id, spans in by_task.items():
        spans.sort()
        if any(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:], strict=False)):
            bad.append(task_id)
    return bad


#: demo.fail and its async twin: every outcome must come out right for both kinds of lambda.
FAILS = ("demo.fail", "demo.async_fail")


@pytest.mark.pooled
def test_outcomes_end_in_the_right_status_with_the_right_attempts(
        processes: Processes, env: dict[str, str], workers: Workers) -> None:
    # Given one task of each kind of outcome, of a sync lambda and of its async twin (one run
    # for both, each lambda on a worker of its own: what a run of each alone would check)
    made = {fail: {"fatal": atf.schedule(fail, {"mode": "fatal"}),
                   "retried": atf.schedule(fail, {"mode": "retriable", "times": 2}),
                   "crashed": atf.schedule(fail, {"mode": "crash", "times": 1}),
                   "dead": atf.schedule(fail, {"mode": "retriable", "times": 99},
                                        max_attempts=3)}
            for fail in FAILS}
    # When a consumer and, for each lambda, a supervised worker (which restarts a crashed
    # process) run
    processes.start("runconsumer", env=env)
    for fail in FAILS:
        # One task at a time per process: a crash takes down only its own task
        workers.start(fail, "--processes", "2", "--threads", "1", "--async-slots", "1")
    wait_for(lambda: all_final(4 * len(FAILS)), timeout_s=90,
             message=f"{4 * len(FAILS)} final tasks")

    # Then each ends as its lambda decided, with its attempts on record
    def outcome(task: TaskEntity) -> tuple[str, int, list[str]]:
        row = TaskEntity.objects.get(pk=task.pk)
        history = [attempt.outcome for attempt in attempts_of(row.pk)]
        return row.status, row.attempts, history

    for fail, tasks in made.items():
        assert outcome(tasks["fatal"]) == ("fatal_failure", 1, ["fatal"]), fail
        assert outcome(tasks["retried"]) == ("success", 3, ["retry", "retry", "success"]), fail
        assert outcome(tasks["crashed"]) == ("success", 2, ["lost", "success"]), fail
        assert outcome(tasks["dead"]) == ("dead", 3, ["retry", "retry", "dead"]), fail
        assert TaskEntity.objects.get(pk=tasks["fatal"].pk).last_error["message"] == (
            "demo.fail asked to fail for good"), fail
        last_error = TaskEntity.objects.get(pk=tasks["dead"].pk).last_error
        assert last_error["type"] == "RuntimeError", fail
        assert "failing attempt 3" in last_error["message"], fail
        assert "Traceback" in last_error["traceback"], fail


@pytest.mark.drill
def test_at_least_once_and_never_concurrently_while_workers_are_killed(
        processes: Processes, env: dict[str, str], workers: Workers, records: callable) -> None:
    # Given 2,000 tasks and two worker processes
    count = 2000
    scheduling.schedule_many([{"lambda": "demo.record",
                               "payload": {"key": "demo:records", "seconds": 0.02}}] * 1000)
    scheduling.schedule_many([{"lambda": "demo.record",
                               "payload": {"key": "demo:records", "seconds": 0.02}}] * 1000)
    processes.start("runconsumer", env=env)
    running = [workers.start("demo.record", "--threads", "4") for _ in range(2)]
    # When one of them is killed with SIGKILL mid-task, four times, and restarted
    rng = random.Random(7)
    for kill in range(4):
        wait_for(lambda: TaskEntity.objects.filter(status="processing").exists(),
                 message="a running task")
        victim = rng.randrange(len(running))
        running[victim].send_signal(signal.SIGKILL)
        running[victim].wait(10)
        running[victim] = workers.start("demo.record", "--threads", "4")
        time.sleep(rng.uniform(0.2, 1.0) if kill < 3 else 0)
    wait_for(lambda: statuses()["success"] == count, timeout_s=240,
             message=f"{count} successes; now {dict(statuses())}")
    # Then every task succeeded; no two executions of one task overlapped
    lines = records()
    assert {line["task_id"] for line in lines} == set(
        TaskEntity.objects.values_list("pk", flat=True))
    assert overlapping(lines) == []
    # And the interrupted attempts are on record
    lost = TaskAttempt.objects.filter(outcome="lost")
    assert lost.exists()
    assert all(TaskEntity.objects.get(pk=a.task_id).attempts >= 2 for a in lost)


def waiting_for(session: psycopg.Connection) -> int:
    """How many sessions wait for a lock `session` holds (inside its open transaction, whose
    statistics snapshot would otherwise stay as first read)."""
    session.execute("SELECT pg_stat_clear_snapshot()")
    return session.execute("SELECT count(*) FROM pg_stat_activity "
                           "WHERE pg_backend_pid() = ANY(pg_blocking_pids(pid))").fetchone()[0]


@contextlib.contextmanager
def attempts_held() -> Iterator[psycopg.Connection]:
    """A session that holds the attempts' table, so that no attempt's end can be written (a
    result's write waits for it; claims and heartbeats do not); let go at the end."""
    db = connection.settings_dict
    with psycopg.connect(host=db["HOST"], port=db["PORT"], user=db["USER"],
                         dbname=db["NAME"]) as holder:
        holder.execute("LOCK TABLE tasks_core_taskattempt IN EXCLUSIVE MODE")
        yield holder
        holder.rollback()


def result_left_waiting(holder: psycopg.Connection, records: callable) -> TaskEntity:
    """A demo.record task whose lambda returned and whose result's write waits for `holder`."""
    task = atf.schedule("demo.record", {"key": "demo:records", "seconds": 0.1})
    wait_for(lambda: len(records()) == 1, message="the lambda to return")
    wait_for(lambda: waiting_for(holder), message="the result's write to wait for it")
    return task


@pytest.mark.drill
def test_a_result_not_yet_durable_when_its_worker_is_killed_costs_one_lost_attempt_and_a_rerun(
        processes: Processes, env: dict[str, str], workers: Workers, records: callable) -> None:
    # Given a worker, and a session that holds the attempts' table, so that no attempt's end
    # can be written (a result's write waits for it; claims and heartbeats do not)
    processes.start("runconsumer", env=env)
    victim = workers.start("demo.record", "--threads", "1")
    with attempts_held() as holder:
        # When the worker runs a task, its lambda returns (its executor is free, its result
        # waits) and the worker is killed with SIGKILL
        task = result_left_waiting(holder, records)
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        # (the sessions that waited for the table go with it, as a dead client's would)
        holder.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                       "WHERE pg_backend_pid() = ANY(pg_blocking_pids(pid))")
    # Then the task is not lost: after its heartbeat timeout another worker runs it again
    workers.start("demo.record", "--threads", "1")
    wait_for(lambda: TaskEntity.objects.filter(pk=task.pk, status="success").exists(),
             timeout_s=60, message="the task to succeed on the second worker")
    # ...after the first execution ended, never beside it; the killed attempt counts, as lost
    # (a remote worker's last claim, a long poll the API answers after the worker died, may
    # have started the task once more: that attempt is lost too, its lambda never ran)
    first, second = sorted(records(), key=lambda line: line["start"])
    attempts = TaskEntity.objects.get(pk=task.pk).attempts
    assert (first["attempt"], second["attempt"]) == (1, attempts)
    assert attempts == 2 or (workers.kind == "remote" and attempts == 3)
    assert second["start"] > first["end"]
    assert [attempt.outcome for attempt in attempts_of(task.pk)] == (
        ["lost"] * (attempts - 1) + ["success"])


@pytest.mark.drill
def test_a_worker_cut_off_from_the_store_stops_before_its_task_runs_elsewhere_and_comes_back(
        processes: Processes, env: dict[str, str], workers: Workers, records: callable) -> None:
    # Given a worker whose link to ATF (the database, or the API) goes through a proxy we can cut
    proxy = Proxy(*workers.link())
    try:
        processes.start("runconsumer", env=env)
        cut_off = workers.start("demo.record", "--threads", "1", via=proxy)
        # (8 s: still running when the worker ends its lambdas; the rerun need not sleep)
        task = atf.schedule("demo.record", {"key": "demo:records", "seconds": 8,
                                            "retry_seconds": 0})
        wait_for(lambda: TaskEntity.objects.filter(pk=task.pk, status="processing").exists(),
                 message="the task running on the proxied worker")
        # When its link is cut for longer than three heartbeats
        proxy.cut()
        # Then it ends its lambdas: a fresh image of the process takes over (same pid)...
        wait_for(lambda: "replaced its previous image" in log_of(cut_off), timeout_s=20,
                 message="the cut-off worker to replace itself")
        replaced_at = time.time()
        assert "no successful heartbeat for" in log_of(cut_off)
        assert cut_off.poll() is None
        # ...and only then does another worker run the task
        workers.start("demo.record", "--threads", "1")
        wait_for(lambda: TaskEntity.objects.filter(pk=task.pk, status="success").exists(),
                 timeout_s=60, message="the task to succeed on the second worker")
        # And once the link is back, the replacement registers and serves again
        proxy.restore()
        wait_for(lambda: Worker.objects.filter(pid=cut_off.pid).count() == 2, timeout_s=60,
                 message="the replacement to register")
        assert cut_off.poll() is None
    finally:
        proxy.close()
    (line,) = records()
    assert line["attempt"] == 2
    assert line["start"] > replaced_at
    assert [attempt.outcome for attempt in attempts_of(task.pk)] == ["lost", "success"]


def log_of(process: subprocess.Popen) -> str:
    return open(process.log_path).read()  # type: ignore[attr-defined]


@pytest.mark.pooled
def test_a_single_threaded_worker_takes_high_before_default_before_low(
        processes: Processes, env: dict[str, str], records: callable) -> None:
    # Given a backlog of each priority, already in the queues
    for priority in ("low", "default", "high"):
        scheduling.schedule_many([{"lambda": "demo.record", "priority": priority,
                                   "payload": {"key": "demo:records"}}] * 10)
    processes.start("runconsumer", env=env)
    wait_for(lambda: statuses()["enqueued"] == 30, message="30 enqueued tasks")
    # When one single-threaded worker drains it
    processes.start("runworker", "demo.record", "--threads", "1", env=env)
    wait_for(lambda: statuses()["success"] == 30, timeout_s=60, message="30 successes")
    # Then the tasks started in priority order
    priority = dict(TaskEntity.objects.values_list("pk", "priority"))
    order = [priority[line["task_id"]] for line in sorted(records(), key=lambda x: x["start"])]
    assert order == ["high"] * 10 + ["default"] * 10 + ["low"] * 10


def test_a_worker_runs_only_its_lambdas_and_a_backlog_does_not_slow_another(
        processes: Processes, env: dict[str, str], records: callable) -> None:
    # Given a big backlog of demo.sleep served by a slow worker, and a demo.record worker
    scheduling.schedule_many([{"lambda": "demo.sleep", "payload": {"seconds": 0.2}}] * 500)
    processes.start("runconsumer", env=env)
    processes.start("runworker", "demo.sleep", "--threads", "1", env=env)
    processes.start("runworker", "demo.record", "--threads", "2", env=env)
    # When demo.record tasks arrive
    recorded = [atf.schedule("demo.record", {"key": "demo:records"}) for _ in range(20)]
    # Then they are all done while demo.sleep's backlog is still there
    wait_for(lambda: TaskEntity.objects.filter(pk__in=[t.pk for t in recorded],
                                               status="success").count() == 20,
             timeout_s=60, message="the demo.record tasks")
    assert TaskEntity.objects.filter(lambda_ref__name="demo.sleep").exclude(
        status="success").count() > 300
    # And the demo.record worker ran no demo.sleep task, nor the other way round
    workers = {w.worker_id: w.lambdas for w in Worker.objects.all()}
    for task in TaskEntity.objects.exclude(worker="").select_related("lambda_ref"):
        assert workers[task.worker] == [task.lambda_ref.name]


@pytest.mark.drill
def test_sigterm_loses_nothing_and_hands_back_buffered_tasks_at_once(
        processes: Processes, env: dict[str, str], workers: Workers, records: callable) -> None:
    # Given a worker in the middle of a batch (a tenth of a second a task: the 180 or so left
    # at the signal take seconds to run, far from the claim timeout they must not wait out)
    scheduling.schedule_many([{"lambda": "demo.record",
                               "payload": {"key": "demo:records", "seconds": 0.1}}] * 200)
    processes.start("runconsumer", env=env)
    worker = workers.start("demo.record", "--threads", "4")
    wait_for(lambda: statuses()["success"] >= 20, timeout_s=60, message="20 successes")
    # When it gets SIGTERM
    worker.send_signal(signal.SIGTERM)
    # Then it finishes what it runs and exits cleanly, its registry row marked stopped
    assert worker.wait(30) == 0
    assert not TaskEntity.objects.filter(status__in=["processing", "claimed"]).exists()
    assert Worker.objects.get(pid=worker.pid).stopped_at is not None
    # And a new worker finishes the rest long before any claim timeout (60 s) could fire
    started = time.monotonic()
    workers.start("demo.record", "--threads", "4")
    wait_for(lambda: statuses()["success"] == 200, timeout_s=45, message="200 successes")
    assert time.monotonic() - started < 45
    assert overlapping(records()) == []


def test_a_worker_with_the_consumer_inside_needs_no_runconsumer(
        processes: Processes, env: dict[str, str], transactional_db: None,
        records: callable) -> None:
    # Given one worker process that runs the consumer too, and no runconsumer
    scheduling.schedule_many([{"lambda": "demo.record",
                               "payload": {"key": "demo:records", "seconds": 0.05}}] * 60)
    worker = processes.start("runworker", "demo.record", "--threads", "4", "--with-consumer",
                             env=env)
    # When the tasks are due, and one more is scheduled while it runs
    wait_for(lambda: statuses()["success"] == 60, timeout_s=60, message="60 successes")
    late = atf.schedule("demo.record", {"key": "demo:records"})
    # Then every task runs exactly once
    wait_for(lambda: TaskEntity.objects.get(pk=late.pk).status == "success", timeout_s=30,
             message="the late task done")
    assert Counter(line["task_id"] for line in records()) == Counter(
        TaskEntity.objects.values_list("pk", flat=True))
    # And SIGTERM stops the worker and its consumer cleanly
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(30) == 0


def test_with_consumer_refuses_a_remote_worker_and_several_processes() -> None:
    for extra in (["--api", "http://127.0.0.1:9"], ["--processes", "2"]):
        result = subprocess.run(
            [sys.executable, "manage.py", "runworker", "demo.noop", "--with-consumer", *extra],
            cwd=ROOT, env=subprocess_env(ATF_API_TOKEN="x"), capture_output=True, text=True,
            timeout=60)
        assert result.returncode != 0
        assert "--with-consumer runs the consumer in this one process" in result.stderr


def test_a_second_signal_exits_at_once(processes: Processes, env: dict[str, str],
                                       workers: Workers, records: callable) -> None:
    processes.start("runconsumer", env=env)
    worker = workers.start("demo.record", "--threads", "1")
    # (a claimed task is `processing` already, and may wait a moment for its executor: a first
    # signal then hands it back and the worker exits at once, cleanly; its lambda must run)
    atf.schedule("demo.record", {"key": "demo:records", "started_key": "demo:started",
                                 "seconds": 30})
    wait_for(lambda: records("demo:started"), message="the long task's lambda running")
    worker.send_signal(signal.SIGTERM)
    # (the first signal must be handled before the second is sent)
    wait_for(lambda: "SIGTERM received: stopping" in log_of(worker), timeout_s=10,
             message="the first signal handled")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(10) == 130


def test_the_worker_registry_shows_live_workers(workers: Workers) -> None:
    worker = workers.start("demo.noop", "--threads", "3")
    row = wait_for(lambda: Worker.objects.filter(pid=worker.pid).first(),
                   message="the worker's registry row")
    assert (row.lambdas, row.threads, row.stopped_at) == (["demo.noop"], 3, None)
    first_seen = row.last_seen
    wait_for(lambda: Worker.objects.get(pid=worker.pid).last_seen > first_seen,
             message="last_seen to move")


def test_a_killed_worker_stops_counting_as_live_within_a_few_heartbeats(
        processes: Processes, env: dict[str, str], settings: Any) -> None:
    # Given a worker heartbeating every second, shown live by atf_status
    settings.ATF_HEARTBEAT_INTERVAL_S = float(FAST["ATF_HEARTBEAT_INTERVAL_S"])
    worker = processes.start("runworker", "demo.noop", env=env)

    def status() -> str:
        out = io.StringIO()
        call_command("atf_status", "--once", stdout=out)
        return out.getvalue()

    wait_for(lambda: "live workers: 1" in status() and f" {worker.pid} " in status(),
             message="atf_status to show the worker")
    # When it is killed without a chance to say so
    os.killpg(worker.pid, signal.SIGKILL)
    killed_s = time.monotonic()
    # Then within a few heartbeat intervals, not the minute after which the consumer marks
    # it gone, nothing shows it live
    wait_for(lambda: "no live workers" in status(), timeout_s=20,
             message="atf_status to stop showing the killed worker")
    assert time.monotonic() - killed_s < 4 * 1.0 + 3
    assert stats.live_workers(now=timezone.now()) == 0
    assert Worker.objects.get(pid=worker.pid).stopped_at is None  # not marked gone yet


def test_a_heartbeat_timeout_under_three_intervals_is_refused_at_start() -> None:
    env = subprocess_env(ATF_HEARTBEAT_INTERVAL_S="20", ATF_HEARTBEAT_TIMEOUT_S="30")
    done = subprocess.run([sys.executable, "manage.py", "runworker", "demo.noop"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "is not over 3 x ATF_HEARTBEAT_INTERVAL_S" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_remote_worker_with_a_full_token_stops_at_start_in_one_line(
        processes: Processes, env: dict[str, str], transactional_db: None) -> None:
    # Given the API, and a token that may schedule but is not a worker token
    url = start_api(processes, env)
    full = worker_token()
    ApiToken.objects.filter(scope=Scope.WORKER).update(scope=Scope.FULL)
    # When a remote worker starts with it
    done = subprocess.run([sys.executable, "manage.py", "runworker", "demo.noop", "--api", url],
                          cwd=ROOT, env=worker_env(env, full), capture_output=True, text=True,
                          timeout=120)
    # Then it stops at once, saying why in one line
    assert done.returncode != 0
    assert "403" in done.stderr and "This call needs a worker token." in done.stderr
    assert "Traceback" not in done.stderr


def test_a_worker_serving_two_lambdas_lets_neither_starve_the_other(
        processes: Processes, env: dict[str, str], records: callable) -> None:
    # Given one single-threaded worker for two lambdas, one of them with a big backlog
    scheduling.schedule_many([{"lambda": "demo.sleep", "payload": {"seconds": 0.05}}] * 400)
    processes.start("runconsumer", env=env)
    processes.start("runworker", "demo.sleep", "demo.record", "--threads", "1", env=env)
    wait_for(lambda: statuses()["success"] >= 5, message="the backlog to start draining")
    # When the other lambda's tasks arrive
    recorded = [atf.schedule("demo.record", {"key": "demo:records"}) for _ in range(10)]
    # Then they run while the backlog is still there
    wait_for(lambda: TaskEntity.objects.filter(pk__in=[t.pk for t in recorded],
                                               status="success").count() == 10,
             timeout_s=60, message="the demo.record tasks")
    assert TaskEntity.objects.filter(lambda_ref__name="demo.sleep").exclude(
        status="success").count() > 100


def test_a_task_whose_worker_is_killed_after_step_2_of_4_resumes_at_step_3(
        processes: Processes, env: dict[str, str], records: callable) -> None:
    # Given a task of 4 steps (ctx.step) that pauses after step 2 on its first attempt (a
    # direct worker: the remote one's steps go through the worker API, which
    # tests/integration/workers/test_transports.py covers in less than a second)
    workers = Workers("direct", processes, env)
    processes.start("runconsumer", env=env)
    victim = workers.start("demo.steps", "--threads", "1")
    key = "demo:steps"
    task = atf.schedule("demo.steps", {"key": key, "steps": 4, "pause_after": 2,
                                       "seconds": 60})
    # (recorded, not only run: the lambda writes its line before ctx.step records the result,
    # and a kill between the two runs step 2 again, as it should)
    wait_for(lambda: TaskStep.objects.filter(task_id=task.pk).count() == 2, timeout_s=30,
             message="steps 1 and 2 to run and be recorded")
    # When its worker is SIGKILLed there, and another worker takes the task over
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)
    workers.start("demo.steps", "--threads", "1")
    wait_for(lambda: TaskEntity.objects.filter(pk=task.pk, status="success").exists(),
             timeout_s=60, message="the task to succeed on the second worker")
    # Then steps 1 and 2 ran once, on the first attempt, and were not run again: the next
    # attempt got their recorded results and ran steps 3 and 4 only
    ran = [(line["step"], line["attempt"]) for line in records(key)]
    attempts = TaskEntity.objects.get(pk=task.pk).attempts
    assert ran == [(1, 1), (2, 1), (3, attempts), (4, attempts)]
    assert TaskEntity.objects.get(pk=task.pk).result == {"steps": [10, 20, 30, 40]}


@pytest.mark.drill
def test_a_groups_then_runs_exactly_once_while_its_worker_is_killed_twice(
        processes: Processes, env: dict[str, str], records: callable) -> None:
    # Given a group of 1,000 members and a `then`, on a direct worker
    workers = Workers("direct", processes, env)
    processes.start("runconsumer", env=env)
    members, then = "demo:members", "demo:then"
    group = atf.group([atf.call("demo.record", {"key": members, "seconds": 0.01})
                       for _ in range(1000)],
                      then=atf.call("demo.record", {"key": then}))
    # When its worker is SIGKILLed twice while the members run, and replaced each time
    worker = workers.start("demo.record", "--threads", "8")
    for done in (200, 600):
        wait_for(lambda done=done: len(records(members)) >= done, timeout_s=60,
                 message=f"{done} members to run")
        worker.send_signal(signal.SIGKILL)
        worker.wait(10)
        worker = workers.start("demo.record", "--threads", "8")
    wait_for(lambda: records(then), timeout_s=120, message="`then` to run")
    # Then `then` ran exactly once, after every member had succeeded
    time.sleep(1)  # a second release, were there one, would run within the poll interval
    assert len(records(then)) == 1
    assert group.refresh().status == "succeeded" and group.succeeded == 1000
    assert records(then)[0]["start"] >= max(line["end"] for line in records(members))
