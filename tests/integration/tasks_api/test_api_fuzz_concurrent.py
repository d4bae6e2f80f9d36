"""The fuzz's concurrent phase: one team's many tokens hammer a live API at once while another
team's work runs, and the other team's work must keep flowing.

Real processes, as deployed: the API under gunicorn (the project's config, 32 threads), a
consumer, and team demo's remote worker running `demo.noop`. Team demo schedules tasks at a
steady rate through the API and reads its own lists; meanwhile CROWD_THREADS threads of team
crowd (four full tokens and four worker tokens) send random requests: tasks and batches of its
own, long-polling claims, starts and results with forged leases, lists and stats, and attacks
on team demo's objects (its task ids, its lambda's gate, schedules on its lambda), and input no
request may store (times out of range, NUL characters, lone surrogates). Every answer is
checked: no 5xx, no answer to team crowd that shows team demo's names or tokens (or team demo
one of crowd's), no 2xx to a request on the other team's object or with such input.
Afterwards every task of team demo succeeded within FLOWING_BOUND_S, its gate is open, and no
periodic task or override of its lambda appeared. `make test` runs a short phase; `make fuzz`
runs a quarter of ATF_FUZZ_CASES and prints the figures.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
import requests
from django.contrib.auth import get_user_model

from tasks_api.models import Scope
from tasks_core.models import Lambda, LambdaOverride, PeriodicTask, TaskEntity
from tests.conftest import Processes, subprocess_env, wait_for
from tests.factories import LambdaFactory
from tests.integration.tasks_api.test_api_support import BAD_TEXTS, BAD_TIMES, new_token
from tests.remote import start_api, worker_env, worker_token

pytestmark = [pytest.mark.django_db(transaction=True)]

#: Requests of team crowd in the phase: a quarter of `make fuzz`'s ATF_FUZZ_CASES.
CASES = max(400, int(os.environ.get("ATF_FUZZ_CASES", "300")) // 4)
#: Team crowd's threads sending at once (the API has 32).
CROWD_THREADS = 24
#: Team demo's tasks a second through the API while team crowd hammers it.
DEMO_RATE = 5.0
#: The longest one of team demo's tasks may take from scheduling to success meanwhile.
FLOWING_BOUND_S = 20.0
#: Team demo's tasks the crowd goes on for at least (its CASES may be answered in a second),
#: unless the phase has lasted MAX_PHASE_S: then team demo was starved, and the test says so.
MIN_DEMO_TASKS = 20
MAX_PHASE_S = 60.0
DEMO_LAMBDA = "demo.noop"


@dataclass(kw_only=True)
class Observations:
    """Every answer's status, and what was wrong, from all threads."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    by_status: Counter = field(default_factory=Counter)
    server_errors: list[str] = field(default_factory=list)
    cross_team: list[str] = field(default_factory=list)
    demo_ids: list[int] = field(default_factory=list)

    @property
    def cases(self) -> int:
        return sum(self.by_status.values())

    def check(self, request: str, answer: requests.Response | None, *, foreign: bool,
              hostile: bool, markers: list[str]) -> None:
        """Count one answer; `foreign`: the request aimed at the other team's object, and
        `hostile`: it carried input no request may store, so it must not succeed; `markers`:
        the other team's strings, never in the answer."""
        code = answer.status_code if answer is not None else 0
        text = answer.text if answer is not None else ""
        problems = []
        if code >= 500:
            problems.append(f"{request} -> {code} {text[:200]}")
        if foreign and 200 <= code < 300:
            problems.append(f"{request} -> {code}: reached the other team's object")
        if hostile and 200 <= code < 300:
            problems.append(f"{request} -> {code}: stored input it must refuse")
        problems += [f"{request} -> {code} shows {marker!r}" for marker in markers
                     if marker in text and marker not in request]
        with self.lock:
            self.by_status[code] += 1
            if code >= 500:
                self.server_errors.append(problems.pop(0))
            self.cross_team += problems

    def flag(self, problem: str) -> None:
        with self.lock:
            self.cross_team.append(problem)


class Caller:
    """One token's requests to the API, each answer checked."""

    def __init__(self, url: str, token: str, seen: Observations, markers: list[str]) -> None:
        self.url, self.seen, self.markers = url, seen, markers
        self.session = requests.Session()  # shared by the threads: a connection each
        self.session.mount("http://", requests.adapters.HTTPAdapter(pool_maxsize=CROWD_THREADS))
        self.session.headers["Authorization"] = f"Token {token}"

    def call(self, method: str, path: str, body: Any = None, *, foreign: bool = False,
             hostile: bool = False, timeout_s: float = 30) -> requests.Response | None:
        try:
            answer = self.session.request(method, f"{self.url}{path}", json=body,
                                          timeout=timeout_s)
        except requests.RequestException:
            answer = None
        self.seen.check(f"{method} {path} {body!r:.200}", answer, foreign=foreign,
                        hostile=hostile, markers=self.markers)
        return answer


class Crowd:
    """Team crowd's threads: random requests until CASES were answered and team demo
    scheduled MIN_DEMO_TASKS meanwhile, or MAX_PHASE_S passed."""

    def __init__(self, url: str, seen: Observations, lambda_name: str, *, full: list[str],
                 workers: list[str], markers: list[str]) -> None:
        self.seen, self.lambda_name = seen, lambda_name
        self.full = [Caller(url, token, seen, markers) for token in full]
        self.workers = [Caller(url, token, seen, markers) for token in workers]
        self._threads = [threading.Thread(target=self._run, args=(random.Random(n),))
                         for n in range(CROWD_THREADS)]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def join(self) -> None:
        for thread in self._threads:
            thread.join(timeout=120)

    def running(self) -> bool:
        return any(thread.is_alive() for thread in self._threads)

    def _run(self, rnd: random.Random) -> None:
        worker = f"crowd-host:{rnd.random():.6f}:w"
        rnd.choice(self.workers).call("POST", "/api/v1/worker/register/", {
            "worker": worker, "host": "crowd", "pid": 1, "lambdas": [self.lambda_name],
            "threads": 4})
        ends_s = time.monotonic() + MAX_PHASE_S
        while (self.seen.cases < CASES or len(self.seen.demo_ids) < MIN_DEMO_TASKS) \
                and time.monotonic() < ends_s:
            rnd.choice(self._requests)(self, rnd, worker)

    def _demo_id(self, rnd: random.Random) -> int:
        with self.seen.lock:
            return rnd.choice(self.seen.demo_ids) if self.seen.demo_ids else 1

    # --- what team crowd sends ------------------------------------------------------------

    def _schedule(self, rnd: random.Random, _worker: str) -> None:
        rnd.choice(self.full).call("POST", "/api/v1/tasks/", {
            "lambda": self.lambda_name, "payload": {"n": rnd.random()},
            "delay": rnd.choice([0, 0, 5])})

    def _batch(self, rnd: random.Random, _worker: str) -> None:
        rnd.choice(self.full).call("POST", "/api/v1/tasks/batch/", {"tasks": [
            {"lambda": self.lambda_name} for _ in range(rnd.randint(1, 300))]})

    def _list(self, rnd: random.Random, _worker: str) -> None:
        query = rnd.choice(["", "?status=enqueued", f"?lambda={DEMO_LAMBDA}",
                            "?fields=result,payload", "?page_size=1000"])
        rnd.choice(self.full).call("GET", f"/api/v1/tasks/{query}")

    def _read_shared(self, rnd: random.Random, _worker: str) -> None:
        rnd.choice(self.full).call("GET", rnd.choice([
            "/api/v1/stats/", "/api/v1/lambdas/", "/api/v1/periodic-tasks/",
            "/api/v1/dead-letters/"]))

    def _attack_task(self, rnd: random.Random, _worker: str) -> None:
        task_id = self._demo_id(rnd)
        action = rnd.choice(["", "cancel/", "requeue/", "run-now/"])
        rnd.choice(self.full).call("POST" if action else "GET",
                                   f"/api/v1/tasks/{task_id}/{action}", foreign=True)

    def _attack_lambda(self, rnd: random.Random, _worker: str) -> None:
        caller = rnd.choice(self.full)
        rnd.choice([
            lambda: caller.call("POST", f"/api/v1/lambdas/{DEMO_LAMBDA}/gate/",
                                {"gate": "paused"}, foreign=True),
            lambda: caller.call("POST", "/api/v1/tasks/", {"lambda": DEMO_LAMBDA},
                                foreign=True),
            lambda: caller.call("POST", "/api/v1/periodic-tasks/", {
                "name": f"crowd-{rnd.random():.6f}", "lambda": DEMO_LAMBDA,
                "interval_s": 1}, foreign=True),
            lambda: caller.call("PATCH", f"/api/v1/lambdas/{DEMO_LAMBDA}/",
                                {"max_attempts": 1}, foreign=True),
        ])()

    def _hostile(self, rnd: random.Random, _worker: str) -> None:
        """A time out of range, a NUL or a lone surrogate where a request gives one."""
        caller, own = rnd.choice(self.full), self.lambda_name
        when, text = rnd.choice(BAD_TIMES), rnd.choice(BAD_TEXTS)
        path, body = rnd.choice([
            ("/api/v1/tasks/", {"lambda": own, "run_at": when}),
            ("/api/v1/tasks/", {"lambda": text}),
            ("/api/v1/tasks/", {"lambda": own, "payload": {text: text}}),
            ("/api/v1/tasks/batch/", {"tasks": [{"lambda": own, "idempotency_key": text}]}),
            ("/api/v1/tasks/batch/", {"tasks": [{"lambda": own, "run_at": when}]}),
            (f"/api/v1/lambdas/{own}/gate/", {"state": "paused", "until": when}),
            ("/api/v1/tokens/", {"name": "crowd", "expires_at": when}),
        ])
        caller.call("POST", path, body, hostile=True)

    def _periodic(self, rnd: random.Random, _worker: str) -> None:
        rnd.choice(self.full).call("POST", "/api/v1/periodic-tasks/", {
            "name": f"crowd-{rnd.random():.6f}", "lambda": self.lambda_name,
            "interval_s": rnd.choice([1, 60])})

    def _claim(self, rnd: random.Random, worker: str) -> None:
        rnd.choice(self.workers).call("POST", "/api/v1/worker/claim/", {
            "worker": worker, "max": rnd.randint(1, 3), "wait_s": rnd.choice([0, 2])})

    def _forged_leases(self, rnd: random.Random, worker: str) -> None:
        leases = [{"id": self._demo_id(rnd), "lease": rnd.randint(0, 3)}]
        call = rnd.choice(["start", "heartbeat", "finish", "release"])
        body: dict[str, Any] = {"tasks": leases}
        if call == "heartbeat":
            body["worker"] = worker
        elif call == "finish":
            body = {"worker": worker, "results": [
                {**lease, "outcome": "fatal", "result": None,
                 "error": {"type": "Crowd", "message": "m", "traceback": ""}}
                for lease in leases]}
        answer = rnd.choice(self.workers).call("POST", f"/api/v1/worker/{call}/", body)
        if answer is not None and answer.status_code == 200 and call == "start" and any(
                item.get("started") for item in answer.json().get("tasks", [])):
            self.seen.flag(f"team crowd started team demo's task: {leases}")

    _requests: list[Callable[[Crowd, random.Random, str], None]] = [
        _schedule, _batch, _list, _read_shared, _attack_task, _attack_lambda, _hostile,
        _periodic, _claim, _claim, _claim, _forged_leases]


def _demo_flow(url: str, token: str, seen: Observations, markers: list[str],
               crowd: Crowd) -> None:
    """Team demo's steady work while the crowd runs: a task at DEMO_RATE a second (after
    Retry-After when refused), and a read of its own list now and then."""
    demo = Caller(url, token, seen, markers)
    started, made = time.monotonic(), 0
    while crowd.running():
        time.sleep(max(0.0, started + made / DEMO_RATE - time.monotonic()))
        answer = demo.call("POST", "/api/v1/tasks/", {"lambda": DEMO_LAMBDA})
        if answer is not None and answer.status_code == 201:
            with seen.lock:
                seen.demo_ids.append(answer.json()["id"])
        elif answer is not None and answer.status_code == 429:
            time.sleep(float(answer.headers.get("Retry-After", 1)))
        made += 1
        if made % 10 == 0:
            demo.call("GET", "/api/v1/tasks/?page_size=100")


def test_one_team_hammering_the_api_at_once_leaves_the_other_teams_work_flowing(
        processes: Processes, redis_client: redis.Redis) -> None:
    # Given the API, a consumer and team demo's remote worker, as deployed
    env = subprocess_env(ATF_POLL_INTERVAL_S="0.2")
    url = start_api(processes, env, threads=32)
    processes.start("runconsumer", env=env)
    processes.start("runworker", DEMO_LAMBDA, "--threads", "4", "--api", url,
                    env=worker_env(env, worker_token()))
    demo_lambda = Lambda.objects.get(name=DEMO_LAMBDA)
    demo_user = get_user_model().objects.create(username="hand-of-team-demo")
    demo_lambda.team.members.add(demo_user)
    demo_token = new_token(demo_user, demo_lambda.team)
    # And team crowd, four people with a full and a worker token each
    crowd_lambda = LambdaFactory(name="crowd.work")
    people = [get_user_model().objects.create(username=f"crowd-person-{n}") for n in range(4)]
    crowd_lambda.team.members.add(*people)
    full = [new_token(person, crowd_lambda.team) for person in people]
    workers = [new_token(person, crowd_lambda.team, scope=Scope.WORKER) for person in people]
    demo_markers = ["demo.", demo_user.username, demo_token[:12]]
    crowd_markers = ["crowd.work", "crowd-person-", *(token[:12] for token in full + workers)]
    seen = Observations()
    crowd = Crowd(url, seen, crowd_lambda.name, full=full, workers=workers,
                  markers=demo_markers)
    # When team crowd sends CASES requests from CROWD_THREADS threads at once, while team
    # demo schedules and reads
    started = time.monotonic()
    crowd.start()
    flow = threading.Thread(target=_demo_flow, args=(url, demo_token, seen, crowd_markers,
                                                     crowd))
    flow.start()
    crowd.join()
    flow.join(timeout=60)
    elapsed_s = time.monotonic() - started
    # Then every task of team demo succeeded, each within the bound
    ids = list(seen.demo_ids)
    wait_for(lambda: TaskEntity.objects.filter(pk__in=ids, status="success").count() == len(ids),
             timeout_s=FLOWING_BOUND_S + 30, message="team demo's tasks to succeed")
    took = sorted((finished - created).total_seconds() for created, finished in
                  TaskEntity.objects.filter(pk__in=ids).values_list("created_at", "finished_at"))
    print(f"fuzz concurrent: {seen.cases} cases from {CROWD_THREADS} threads of team crowd "
          f"and team demo, {len(seen.server_errors)} 5xx, {len(seen.cross_team)} cross-team; "
          f"team demo: {len(ids)} tasks, p95 {took[int(0.95 * (len(took) - 1))]:.2f} s, "
          f"slowest {took[-1]:.2f} s; {elapsed_s:.0f} s; answers "
          + ", ".join(f"{code}: {n}" for code, n in sorted(seen.by_status.items())))
    assert len(ids) >= MIN_DEMO_TASKS, f"team demo scheduled {len(ids)} tasks in {elapsed_s:.0f} s"
    assert took[-1] < FLOWING_BOUND_S, took[-5:]
    # And no answer was a 5xx, nor showed or changed the other team's objects
    assert seen.server_errors == [], seen.server_errors[:10]
    assert seen.cross_team == [], seen.cross_team[:10]
    demo_lambda.refresh_from_db()
    assert demo_lambda.gate == "open"
    assert not PeriodicTask.objects.filter(lambda_ref=demo_lambda).exists()
    assert not LambdaOverride.objects.filter(lambda_ref=demo_lambda).exists()
