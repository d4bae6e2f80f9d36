"""Remote workers on hosts of their own: each `runworker --api` runs in a network namespace
with a veth link to this machine (tests/netns.py), as on a lambda host, and the link fails.

- The link goes down for longer than the heartbeat budget: the worker ends its lambdas by
  replacing itself, nothing runs twice at once, and it serves again once the link is back.
- The link hangs without closing (every open connection stops, new ones flow): calls time out
  within the budget and go again on fresh connections; no worker ends, no task runs twice
  (the tasks a hung claim took run after their heartbeat timeout).
- A rolling deploy of the API costs nothing: the restart of one API process, of all of them
  (gunicorn's graceful reload), and of the whole server, under load, ends no worker and runs no
  task twice. The heartbeat settings are the shipped ones (every 5 s, a budget of three
  intervals): a failed heartbeat is tried again every second on a fresh connection, a heartbeat
  call gives up after one interval, and a start or a result is retried for as long as the
  budget lasts. Where namespaces cannot be made, this one runs with the workers on loopback.

The lambdas' own Redis (demo.record writes its records there) is reached over the host's link
too, through a proxy on the host's gateway (tests.remote.host_redis).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import redis

from tasks_core import atf, scheduling
from tasks_core.models import TaskAttempt, TaskEntity, Worker
from tests import netns
from tests.acceptance.test_workers import overlapping
from tests.conftest import Processes, subprocess_env, wait_for
from tests.netns import WorkerHost
from tests.proxy import Proxy
from tests.remote import host_redis, start_api, start_on_host, worker_env, worker_token
from workers.replacement import REPLACING

# serial: a worker host's heartbeat budget is 3 s, its API calls time out after 1 s; beside
# other tests' processes a starved heartbeat ends a worker that nothing cut off (seen at a load
# of 10 on 2 cores: an extra replacement, a worker replaced while the API restarted)
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.serial,
              pytest.mark.drill]

#: Heartbeats every second: the budget is 3 s, and a task without one for 5 s runs again.
FAST = {"ATF_HEARTBEAT_INTERVAL_S": "1", "ATF_HEARTBEAT_TIMEOUT_S": "5",
        "ATF_ENQUEUE_TIMEOUT_S": "5", "ATF_CLAIM_TIMEOUT_S": "60", "ATF_POLL_INTERVAL_S": "0.2"}
#: Seconds the API stays down between stopping and starting it, to which its drain and its
#: start-up add more (8 to 12 on a loaded 2-core machine): inside the heartbeat budget of
#: 15 s, and past the two seconds a start or a result used to be retried for.
DOWN_S = 1.0


def log_of(process: subprocess.Popen) -> str:
    return Path(process.log_path).read_text()  # type: ignore[attr-defined]


def successes() -> int:
    return TaskEntity.objects.filter(status="success").count()


def records(redis_client: redis.Redis) -> list[dict]:
    return [json.loads(line) for line in redis_client.lrange("demo:records", 0, -1)]


def ran_once_each(lines: list[dict], tasks: int) -> None:
    """Every task ran exactly once: one attempt, one recorded execution, none overlapping."""
    assert Counter(Counter(line["task_id"] for line in lines).values()) == {1: tasks}
    assert overlapping(lines) == []
    # A success at the first attempt leaves no attempt row: the task's row holds it
    assert TaskEntity.objects.filter(status="success", attempts=1).count() == tasks
    assert not TaskAttempt.objects.exists()


class Site:
    """The API on this machine, reachable from the worker hosts, and a way to start remote
    workers on a host of their own (or on loopback, `hosts` empty)."""

    def __init__(self, processes: Processes, env: dict[str, str], hosts: list[WorkerHost], *,
                 web_processes: int = 1) -> None:
        self.processes, self.env, self.hosts = processes, env, hosts
        self.web_processes = web_processes
        self.url = self.start_api()
        self.master = processes.children[-1]
        self.host_env = worker_env(env, worker_token())
        self.proxies: list[Proxy] = []

    def start_api(self, port: int | None = None) -> str:
        return start_api(self.processes, self.env, web_processes=self.web_processes, port=port,
                         also_on=[host.gateway for host in self.hosts])

    def api_on(self, host: WorkerHost) -> str:
        return f"http://{host.gateway}:{urlsplit(self.url).port}"

    def worker(self, host: WorkerHost | None, *args: str, api: str | None = None
               ) -> subprocess.Popen:
        """A remote worker on `host` (on loopback without one), reaching the API at `api`."""
        if host is None:
            return self.processes.start("runworker", *args, "--api", api or self.url,
                                        env=self.host_env)
        proxy, env = host_redis(host, self.host_env)
        self.proxies.append(proxy)
        return start_on_host(self.processes, host, api or self.api_on(host), env, *args)

    def close(self) -> None:
        for proxy in self.proxies:
            proxy.close()


@pytest.fixture
def site_for(processes: Processes) -> Iterator[Callable[..., Site]]:
    made: list[Site] = []

    def make(env: dict[str, str], hosts: list[WorkerHost], **options: int) -> Site:
        made.append(Site(processes, env, hosts, **options))
        return made[-1]

    yield make
    for site in made:
        site.close()


def test_a_worker_whose_link_goes_down_replaces_itself_and_serves_again_once_it_is_back(
        processes: Processes, worker_hosts: list[WorkerHost], site_for: Callable[..., Site],
        redis_client: redis.Redis) -> None:
    # Given a remote worker on a host of its own, running a long task (a claim timeout of 5 s:
    # a task claimed for a connection that is gone is not held for long)
    env = subprocess_env(**{**FAST, "ATF_CLAIM_TIMEOUT_S": "5"})
    site = site_for(env, worker_hosts)
    processes.start("runconsumer", env=env)
    host = worker_hosts[0]
    worker = site.worker(host, "demo.record", "--threads", "2")
    # (5 s on the first attempt, which the link's fault cuts short; none on the rerun)
    task = atf.schedule("demo.record", {"key": "demo:records", "seconds": 5,
                                        "retry_seconds": 0})
    wait_for(lambda: TaskEntity.objects.filter(pk=task.pk, status="processing").exists(),
             timeout_s=60, message="the task running on the worker host")
    # When its link goes down for longer than the heartbeat budget (3 s)
    host.link_down()
    down_at = time.monotonic()
    # Then it ends its lambdas within the budget (and slack): a fresh image takes over
    wait_for(lambda: REPLACING in log_of(worker), timeout_s=20,
             message="the cut-off worker to replace itself")
    ended_after_s = time.monotonic() - down_at
    replaced_at = time.time()
    assert "no successful heartbeat for" in log_of(worker)
    assert worker.poll() is None
    # And once the link is back, the fresh image registers and serves again
    host.link_up()
    wait_for(lambda: Worker.objects.filter(pid=worker.pid).count() == 2, timeout_s=60,
             message="the replacement to register")
    later = scheduling.schedule_many([{"lambda": "demo.record",
                                       "payload": {"key": "demo:records", "seconds": 0.2}}] * 6)
    wait_for(lambda: successes() == 1 + len(later), timeout_s=60, message="every task done")
    # Nothing lost, nothing overlapping: one recorded run each, by the fresh image; the long
    # task's began after the cut-off worker had ended its lambdas
    lines = records(redis_client)
    assert overlapping(lines) == []
    assert Counter(line["task_id"] for line in lines) == Counter([task.pk,
                                                                  *(t.pk for t in later)])
    assert {line["pid"] for line in lines} == {worker.pid}
    (first,) = [line for line in lines if line["task_id"] == task.pk]
    assert first["attempt"] == 2 and first["start"] > replaced_at
    assert ended_after_s < 3 + 5  # the budget, and slack for a loaded machine


def test_a_link_that_hangs_without_closing_costs_a_timeout_not_a_worker_or_a_rerun(
        processes: Processes, worker_hosts: list[WorkerHost], site_for: Callable[..., Site],
        redis_client: redis.Redis) -> None:
    # Given a remote worker on a host of its own whose link to the API goes through a proxy,
    # heartbeats every 2 s (a budget of 6 s) and ATF_API_TIMEOUT_S at its default (10 s)
    env = subprocess_env(**{**FAST, "ATF_HEARTBEAT_INTERVAL_S": "2",
                            "ATF_HEARTBEAT_TIMEOUT_S": "10"})
    site = site_for(env, worker_hosts)
    host = worker_hosts[0]
    link = Proxy("127.0.0.1", urlsplit(site.url).port or 80, listen_host=host.gateway)
    site.proxies.append(link)
    processes.start("runconsumer", env=env)
    worker = site.worker(host, "demo.record", "--threads", "4",
                         api=f"http://{host.gateway}:{link.port}")
    tasks = 120
    scheduling.schedule_many([{"lambda": "demo.record",
                               "payload": {"key": "demo:records", "seconds": 0.4}}] * tasks)
    wait_for(lambda: successes() >= 10, timeout_s=60, message="work under way")
    # When every connection open now stops forwarding for good, without closing
    hung = link.hang()
    done = successes()
    # Then the worker goes on over fresh connections: every task succeeds...
    wait_for(lambda: successes() == tasks, timeout_s=90,
             message=f"{tasks} successes; now {successes()}")
    # ...the hang was met (a call timed out and was tried again) and cost no worker...
    log = log_of(worker)
    assert hung >= 2 and done < tasks
    assert "Read timed out" in log or "heartbeat failed" in log, log[-3000:]
    assert REPLACING not in log, log[-3000:]
    assert worker.poll() is None
    # ...and no task ran twice: one recorded execution each, none overlapping. A claim that
    # hung took and started its tasks for an answer that never came: each such task has a
    # `lost` attempt and ran after its heartbeat timeout, once
    lines = records(redis_client)
    assert Counter(Counter(line["task_id"] for line in lines).values()) == {1: tasks}
    assert overlapping(lines) == []
    assert set(TaskAttempt.objects.values_list("outcome", flat=True)) <= {"lost"}
    assert successes() == tasks


def test_restarting_the_api_under_load_ends_no_worker_and_runs_no_task_twice(
        processes: Processes, site_for: Callable[..., Site], redis_client: redis.Redis) -> None:
    # Given the API as two gunicorn processes, a consumer, two remote workers (each on a host
    # of its own where namespaces can be made, else on loopback) and a backlog
    with contextlib.ExitStack() as stack:
        hosts = [] if netns.unavailable() else stack.enter_context(netns.worker_hosts(2))
        restart_the_api_under_load(processes, site_for, redis_client, hosts)


def restart_the_api_under_load(processes: Processes, site_for: Callable[..., Site],
                               redis_client: redis.Redis, hosts: list[WorkerHost]) -> None:
    tasks = 600
    env = subprocess_env(ATF_POLL_INTERVAL_S="0.2")
    site = site_for(env, hosts, web_processes=2)
    master = site.master
    processes.start("runconsumer", env=env)
    workers = [site.worker(host, "demo.record", "--threads", "4")
               for host in (hosts or [None, None])]
    scheduling.schedule_many([{"lambda": "demo.record",
                               "payload": {"key": "demo:records", "seconds": 0.3}}] * tasks)
    wait_for(lambda: successes() >= 20, timeout_s=60, message="work under way")

    def progressed(since: int, by: int = 20) -> bool:
        return successes() >= min(since + by, tasks)

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
    site.start_api(port=urlsplit(site.url).port)
    wait_for(lambda: successes() == tasks, timeout_s=180,
             message=f"{tasks} successes; now {successes()}")
    # Then no worker ended or replaced itself...
    for worker in workers:
        assert worker.poll() is None
        assert REPLACING not in log_of(worker), log_of(worker)[-3000:]
    # ...and every task ran exactly once: one attempt each, one execution each, none lost
    ran_once_each(records(redis_client), tasks)
    assert done < tasks  # the last restart happened under load too


def web_workers(master: subprocess.Popen) -> set[int]:
    """The pids of gunicorn's worker processes under `master`."""
    listing = subprocess.run(["pgrep", "-P", str(master.pid)], capture_output=True, text=True)
    return {int(pid) for pid in listing.stdout.split()}
