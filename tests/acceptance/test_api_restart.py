"""A rolling deploy of the API costs nothing: remote workers ride through the restart of one
API process, of all of them (gunicorn's graceful reload), and of the whole server, under load,
without a worker ending and without a task running twice.

The heartbeat settings are the shipped ones (every 5 s, a budget of three intervals): a failed
heartbeat is tried again every second on a fresh connection, a heartbeat call gives up after
one interval, and a start or a result is retried for as long as the budget lasts.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import redis

from tasks_core import scheduling
from tasks_core.models import TaskAttempt, TaskEntity
from tests.acceptance.test_workers import overlapping
from tests.conftest import Processes, subprocess_env, wait_for
from tests.remote import start_api, worker_env, worker_token

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

TASKS = 600
#: Seconds the API stays down between stopping and starting it, to which its drain and its
#: start-up add a few more (up to 8 on a loaded 2-core machine): inside the heartbeat budget of
#: 15 s, and past the two seconds a start or a result used to be retried for.
DOWN_S = 3.0


def web_workers(master: subprocess.Popen) -> set[int]:
    """The pids of gunicorn's worker processes under `master`."""
    listing = subprocess.run(["pgrep", "-P", str(master.pid)], capture_output=True, text=True)
    return {int(pid) for pid in listing.stdout.split()}


def successes() -> int:
    return TaskEntity.objects.filter(status="success").count()


def progressed(since: int, by: int = 20) -> bool:
    return successes() >= min(since + by, TASKS)


def test_restarting_the_api_under_load_ends_no_worker_and_runs_no_task_twice(
        processes: Processes, redis_client: redis.Redis) -> None:
    # Given the API as two gunicorn processes, a consumer, two remote workers and a backlog
    env = subprocess_env(ATF_POLL_INTERVAL_S="0.2")
    url = start_api(processes, env, web_processes=2)
    master = processes.children[-1]
    processes.start("runconsumer", env=env)
    host_env = worker_env(env, worker_token())
    workers = [processes.start("runworker", "demo.record", "--threads", "4", "--api", url,
                               env=host_env) for _ in range(2)]
    scheduling.schedule_many([{"lambda": "demo.record",
                               "payload": {"key": "demo:records", "seconds": 0.3}}] * TASKS)
    wait_for(lambda: successes() >= 20, timeout_s=60, message="work under way")
    # When one API process is restarted (its master starts another)...
    before, done = web_workers(master), successes()
    os.kill(min(before), signal.SIGTERM)
    wait_for(lambda: len(web_workers(master) - before) == 1, message="a new API process")
    wait_for(lambda: progressed(done), timeout_s=60, message="work after one restart")
    # ...then all of them, gracefully (SIGHUP: new processes, the old ones drain)...
    before, done = web_workers(master), successes()
    master.send_signal(signal.SIGHUP)
    wait_for(lambda: len(web_workers(master)) == 2 and not web_workers(master) & before,
             timeout_s=60, message="two new API processes")
    wait_for(lambda: progressed(done), timeout_s=60, message="work after the reload")
    # ...then the whole server, stopped, and started again on its port after a deploy's pause
    done = successes()
    master.send_signal(signal.SIGTERM)
    master.wait(40)
    time.sleep(DOWN_S)  # the scenario itself: nothing answers for this long
    start_api(processes, env, web_processes=2, port=urlsplit(url).port)
    wait_for(lambda: successes() == TASKS, timeout_s=180,
             message=f"{TASKS} successes; now {successes()}")
    # Then no worker ended or replaced itself...
    for worker in workers:
        assert worker.poll() is None
        log = Path(worker.log_path).read_text()  # type: ignore[attr-defined]
        assert "replacing this worker process" not in log, log[-3000:]
    # ...and every task ran exactly once: one attempt each, one execution each, none lost
    lines = [json.loads(line) for line in redis_client.lrange("demo:records", 0, -1)]
    assert Counter(Counter(line["task_id"] for line in lines).values()) == {1: TASKS}
    assert overlapping(lines) == []
    assert set(TaskAttempt.objects.values_list("outcome", flat=True)) == {"success"}
    assert TaskAttempt.objects.count() == TASKS
    assert done < TASKS  # the last restart happened under load too
