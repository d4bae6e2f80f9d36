"""A stateful fuzzer of the REST API: two teams schedule, read, cancel, requeue, gate, re-send
batches, add periodic tasks and overrides, and run remote workers (register, claim, start,
renew, finish, release with worker tokens) in random order; after every response it checks
that nothing of the other team was seen (its lambda, periodic-task, worker and user names,
its tokens' prefixes) or changed (its tasks, gates, collections, links, tokens, periodic tasks,
overrides and workers), and that nothing answered 5xx.

The strategies draw the teams' real lambda names, existing task ids, known collections and
idempotency keys, so most requests are accepted and reach the deep paths; some are wrong on
purpose (another team's names and ids, bad fields, times out of range, NUL characters and
lone surrogates), and a share are schemathesis cases of any operation. `make test` runs a
short pass; `make fuzz` runs ATF_FUZZ_CASES (10,000) and prints the figures.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from datetime import timezone as fixed_offset
from typing import Any

import pytest
import schemathesis
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections, connection
from django.test import override_settings
from django.utils import timezone
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule, run_state_machine_as_test
from rest_framework.test import APIClient

from tasks_api.models import Scope
from tasks_core import periodic, queues
from tasks_core.models import PeriodicTask
from tasks_core.states import TaskStatus
from tests.factories import LambdaFactory, TaskFactory
from tests.integration.tasks_api.test_api_support import BAD_TEXTS, BAD_TIMES, member, new_token
from workers.consumer import Consumer

pytestmark = pytest.mark.django_db

#: Requests of one run: a short pass in the suite; `make fuzz` asks for 10,000.
CASES = int(os.environ.get("ATF_FUZZ_CASES", "300"))
#: Steps of one random sequence.
STEPS = 40

def timezone_at(hours: int) -> fixed_offset:
    return fixed_offset(timedelta(hours=hours))


COLLECTIONS = ["default", "eu", "us.west", "batch:7", "bad name", "\u202e", "x" * 101]
PRIORITIES = ["high", "default", "low", "urgent", ""]
#: Idempotency keys are drawn from few characters, so that some repeat.
KEY_CHARS = "abc"
GATES = ["open", "paused", "dropped", "shut"]
TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=20)
#: Times a request may give, from a year ago to a century ahead, in UTC or at an offset.
TIMES = st.datetimes(datetime(2025, 1, 1), datetime(2126, 1, 1),
                     timezones=st.sampled_from([UTC, timezone_at(-14), timezone_at(14)]))
JSON = st.recursive(st.none() | st.booleans() | st.integers() | TEXT,
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(TEXT, inner, max_size=3), max_leaves=8)


def time_or_bad(data: st.DataObject, rnd: Any) -> str:
    """An ISO 8601 time, out of range one time in ten."""
    if rnd.random() < 0.1:
        return data.draw(st.sampled_from(BAD_TIMES))
    return data.draw(TIMES).isoformat()


@dataclass(kw_only=True)
class FuzzTeam:
    """One team as the fuzzer sees it: its token client, names, and the ids it owns."""

    name: str
    team_id: int
    client: APIClient
    token: str
    lambdas: list[str]
    markers: list[str]  #: strings only this team's answers may contain
    worker_client: APIClient  #: with a worker token of the team
    ids: list[int] = field(default_factory=list)
    workers: list[str] = field(default_factory=list)  #: ids of workers it registered
    leases: list[dict[str, int]] = field(default_factory=list)  #: of tasks it claimed


@dataclass(kw_only=True)
class Figures:
    cases: int = 0
    by_status: Counter = field(default_factory=Counter)
    server_errors: list[str] = field(default_factory=list)
    cross_team: list[str] = field(default_factory=list)
    posts: int = 0
    posts_accepted: int = 0
    claimed: int = 0  #: tasks remote workers claimed

    def summary(self, elapsed_s: float) -> str:
        codes = ", ".join(f"{code}: {n}" for code, n in sorted(self.by_status.items()))
        accepted = self.posts_accepted / max(self.posts, 1)
        return (f"fuzz: {self.cases} cases, {len(self.server_errors)} 5xx, "
                f"{len(self.cross_team)} cross-team; {accepted:.0%} of {self.posts} POSTs "
                f"accepted; {self.claimed} tasks claimed by workers; {elapsed_s:.0f} s; "
                f"answers {codes}")


def _client(token: str) -> APIClient:
    client = APIClient()
    client.raise_request_exception = False
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client


def _team(name: str) -> FuzzTeam:
    someone = member(name, lambda_name=f"{name}.mail")
    second = LambdaFactory(name=f"{name}.bill", team=someone.team)
    ids = [TaskFactory(lambda_ref=lam, status=status, collection="eu").pk
           for lam in (someone.lam, second) for status in TaskStatus]
    worker_token = new_token(someone.user, someone.team, scope=Scope.WORKER)
    # Its own periodic task and worker: their names are the team's alone.
    PeriodicTask.objects.create(name=f"{name}-nightly-payroll", lambda_ref=someone.lam,
                                interval_s=3600)
    return FuzzTeam(name=name, team_id=someone.team.pk, client=_client(someone.token),
                    token=someone.token, lambdas=[someone.lam.name, second.name],
                    markers=[someone.lam.name, second.name, someone.user.username,
                             someone.token[:12], worker_token[:12], f"{name}-nightly-payroll",
                             f"{name}-host"],
                    worker_client=_client(worker_token), ids=ids)


#: Everything of a team that a request could change, in one statement.
FINGERPRINT = """
SELECT md5(concat_ws('|',
  (SELECT string_agg(concat_ws(',', t.id, t.status, t.lease, t.attempts, t.run_at,
                               t.collection, t.priority), ';' ORDER BY t.id)
   FROM tasks_core_taskentity t JOIN tasks_core_lambda l ON l.id = t.lambda_ref_id
   WHERE l.team_id = %(team)s),
  (SELECT string_agg(concat_ws(',', id, gate, gate_until), ';' ORDER BY id)
   FROM tasks_core_lambda WHERE team_id = %(team)s),
  (SELECT string_agg(concat_ws(',', c.id, c.name, c.gate, c.gate_until), ';' ORDER BY c.id)
   FROM tasks_core_collection c JOIN tasks_core_lambda l ON l.id = c.lambda_ref_id
   WHERE l.team_id = %(team)s),
  (SELECT string_agg(concat_ws(',', d.parent_id, d.child_id), ';' ORDER BY d.id)
   FROM tasks_core_taskdependency d JOIN tasks_core_taskentity t ON t.id = d.child_id
   JOIN tasks_core_lambda l ON l.id = t.lambda_ref_id WHERE l.team_id = %(team)s),
  (SELECT string_agg(concat_ws(',', id, revoked_at), ';' ORDER BY id)
   FROM tasks_api_apitoken WHERE team_id = %(team)s),
  (SELECT string_agg(concat_ws(',', p.id, p.name, p.lambda_ref_id, p.cron, p.interval_s,
                               p.enabled, p.payload::text, p.next_run_at), ';' ORDER BY p.id)
   FROM tasks_core_periodictask p WHERE p.team_id = %(team)s),
  (SELECT string_agg(concat_ws(',', o.id, o.option, o.value), ';' ORDER BY o.id)
   FROM tasks_core_lambdaoverride o JOIN tasks_core_lambda l ON l.id = o.lambda_ref_id
   WHERE l.team_id = %(team)s),
  (SELECT string_agg(concat_ws(',', w.id, w.last_seen, w.stopped_at), ';' ORDER BY w.id)
   FROM tasks_core_worker w WHERE w.worker_id LIKE %(workers)s),
  (SELECT string_agg(concat_ws(',', t.id, t.result::text, t.worker), ';' ORDER BY t.id)
   FROM tasks_core_taskentity t JOIN tasks_core_lambda l ON l.id = t.lambda_ref_id
   WHERE l.team_id = %(team)s)))
"""


def fingerprint(team: FuzzTeam) -> str:
    """A digest of everything of the team that a request could change."""
    with connection.cursor() as cursor:
        cursor.execute(FINGERPRINT, {"team": team.team_id, "workers": f"{team.name}-host%"})
        return cursor.fetchone()[0]


def _task_shapes(value: Any) -> Iterator[dict[str, Any]]:
    """Every object in an answer that looks like a task (an id, a lambda and a status)."""
    if isinstance(value, dict):
        if {"id", "lambda", "status"} <= value.keys():
            yield value
        for inner in value.values():
            yield from _task_shapes(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _task_shapes(inner)


class World:
    """The two teams, the figures, and the checks run after every response."""

    def __init__(self, queue: queues.QueueBackend) -> None:
        self.teams = [_team("alpha"), _team("beta")]
        self.figures = Figures()
        self.consumer = Consumer(batch_size=100, poll_interval_s=0.1, queue=queue)
        self.schema = schemathesis.openapi.from_wsgi(
            "/api/schema/?format=json", get_wsgi_application(),
            headers={"Authorization": f"Token {self.teams[0].token}"})

    def other(self, team: FuzzTeam) -> FuzzTeam:
        return self.teams[1 - self.teams.index(team)]

    def send(self, team: FuzzTeam, method: str, path: str, body: Any = None, *,
             worker: bool = False) -> Any:
        """Make one request as `team` (with its worker token if `worker`); check and count its
        answer; return the JSON (or None)."""
        other = self.other(team)
        before = fingerprint(other)
        call = getattr(team.worker_client if worker else team.client, method)
        # As JSON text with escapes: a lone surrogate reaches the server as "\ud800".
        response = (call(path, json.dumps(body), content_type="application/json")
                    if body is not None else call(path))
        request = f"{method.upper()} {path} {json.dumps(body, default=str)}"
        self.record(team, request, response.status_code, response.content,
                    changed=fingerprint(other) != before)
        if method == "post":
            self.figures.posts += 1
            self.figures.posts_accepted += response.status_code < 300
        if not response.content:  # 204
            return None
        try:
            return response.json()
        except ValueError:
            return None

    def record(self, team: FuzzTeam, request: str, code: int, content: bytes, *,
               changed: bool) -> None:
        figures, other = self.figures, self.other(team)
        figures.cases += 1
        figures.by_status[code] += 1
        shown = request[:300]
        if code >= 500:
            figures.server_errors.append(f"{shown} -> {code} {content[:300]!r}")
        if changed:
            figures.cross_team.append(f"{team.name} changed {other.name}'s data: {shown}")
        text = content.decode("utf-8", "replace")
        for marker in other.markers:
            if marker in text and marker not in request:  # an echo of the request is no leak
                figures.cross_team.append(f"{team.name} saw {marker!r}: {shown}")
        try:
            shapes = list(_task_shapes(json.loads(text)))
        except ValueError:
            return
        foreign = [s["id"] for s in shapes if s.get("lambda") not in team.lambdas]
        if foreign:
            figures.cross_team.append(f"{team.name} saw tasks {foreign[:5]}: {shown}")
        for shape in shapes:
            if isinstance(shape.get("id"), int) and shape["id"] not in team.ids:
                team.ids.append(shape["id"])


@contextlib.contextmanager
def keeping_the_connection() -> Iterator[None]:
    """Around a call of the real WSGI app: it must not close the test's connection (Django's
    test client does the same around its own calls)."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)


@pytest.fixture
def world(queue: queues.QueueBackend) -> Iterator[World]:
    # Thousands of 4xx answers each log a warning; the figures say what matters.
    quiet = logging.getLogger("django.request")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        with keeping_the_connection():
            made = World(queue)
        yield made
    finally:
        quiet.setLevel(level)


def machine(world: World) -> type[RuleBasedStateMachine]:
    operations = [result.ok() for result in world.schema.get_all_operations()]
    operations = [op for op in operations if op.path != "/api/schema/"]
    teams = st.sampled_from(world.teams)
    strategies: dict[tuple[int, schemathesis.GenerationMode], st.SearchStrategy] = {}

    class ApiStates(RuleBasedStateMachine):
        """Random sequences of API calls by two teams."""

        def _lambda(self, data: st.DataObject, team: FuzzTeam) -> str:
            """Mostly the team's own lambdas; sometimes the other team's or an unknown one."""
            rnd = data.draw(st.randoms(use_true_random=True))
            if rnd.random() < 0.9:
                return rnd.choice(team.lambdas)
            return rnd.choice([*world.other(team).lambdas, "nobody.knows"])

        def _id(self, data: st.DataObject, team: FuzzTeam) -> int:
            """Mostly one of the team's tasks; sometimes the other team's or a made-up id."""
            # The id lists grow as the run goes: a seeded Random picks, so that each draw
            # looks the same to hypothesis.
            rnd = data.draw(st.randoms(use_true_random=True))
            roll = rnd.random()
            if roll < 0.05:
                return rnd.randint(1, 2**40)
            return rnd.choice(team.ids if roll < 0.85 else world.other(team).ids)

        def _task(self, data: st.DataObject, team: FuzzTeam) -> dict[str, Any]:
            """A task to schedule: each option present or not, and valid 19 times in 20."""
            # Hypothesis favours the last of several choices; a seeded Random is even.
            rnd = data.draw(st.randoms(use_true_random=True))
            body: dict[str, Any] = {"lambda": self._lambda(data, team)}
            if rnd.random() < 0.02:
                body["lambda"] = data.draw(st.sampled_from(BAD_TEXTS))
            options = {
                "payload": (JSON, st.sampled_from([{"text": text} for text in BAD_TEXTS])),
                "collection": (st.sampled_from(COLLECTIONS[:4]), st.sampled_from(COLLECTIONS[4:])),
                "priority": (st.sampled_from(PRIORITIES[:3]), st.sampled_from(PRIORITIES[3:])),
                "delay": (st.floats(0, 3600), st.just(-1)),
                "idempotency_key": (st.text(KEY_CHARS, min_size=1, max_size=3),
                                    st.sampled_from(["", *BAD_TEXTS])),
                "max_attempts": (st.integers(1, 6), st.just(0)),
            }
            for name, (good, bad) in options.items():
                if rnd.random() < 0.5:
                    body[name] = data.draw(bad if rnd.random() < 0.05 else good)
            if "delay" not in body and rnd.random() < 0.25:
                body["run_at"] = time_or_bad(data, rnd)
            if rnd.random() < 0.25:
                body["after"] = [self._id(data, team) for _ in range(rnd.randint(1, 2))]
            return body

        @rule(team=teams, data=st.data())
        def schedule(self, team: FuzzTeam, data: st.DataObject) -> None:
            world.send(team, "post", "/api/v1/tasks/", self._task(data, team))

        @rule(team=teams, data=st.data(), size=st.integers(1, 4), again=st.booleans())
        def batch(self, team: FuzzTeam, data: st.DataObject, size: int, again: bool) -> None:
            body = {"tasks": [self._task(data, team) for _ in range(size)]}
            first = world.send(team, "post", "/api/v1/tasks/batch/", body)
            if again:  # the re-send of a batch answers the same tasks, never a 5xx
                second = world.send(team, "post", "/api/v1/tasks/batch/", body)
                if isinstance(first, dict) and "tasks" in first and "tasks" in (second or {}):
                    assert [t["id"] for t in first["tasks"] if t.get("idempotency_key")] == [
                        t["id"] for t in second["tasks"] if t.get("idempotency_key")]

        @rule(team=teams, data=st.data(), attempts=st.booleans())
        def read_task(self, team: FuzzTeam, data: st.DataObject, attempts: bool) -> None:
            suffix = "attempts/" if attempts else ""
            world.send(team, "get", f"/api/v1/tasks/{self._id(data, team)}/{suffix}")

        @rule(team=teams, data=st.data(),
              action=st.sampled_from(["cancel", "requeue", "run-now"]))
        def act_on_task(self, team: FuzzTeam, data: st.DataObject, action: str) -> None:
            world.send(team, "post", f"/api/v1/tasks/{self._id(data, team)}/{action}/")

        @rule(team=teams, data=st.data(), payloads=st.booleans(),
              status=st.sampled_from([None, *TaskStatus]))
        def list_tasks(self, team: FuzzTeam, data: st.DataObject, payloads: bool,
                       status: str | None) -> None:
            query = {"lambda": self._lambda(data, team)} if data.draw(st.booleans()) else {}
            if status:
                query["status"] = status
            if payloads:
                query["fields"] = "payload"
            path = "/api/v1/tasks/?" + "&".join(f"{k}={v}" for k, v in query.items())
            world.send(team, "get", path)

        @rule(team=teams, data=st.data(), action=st.sampled_from(["requeue", "discard"]),
              by_lambda=st.booleans())
        def dead_letters(self, team: FuzzTeam, data: st.DataObject, action: str,
                         by_lambda: bool) -> None:
            body: dict[str, Any] = ({"lambda": self._lambda(data, team)} if by_lambda else
                                    {"ids": [self._id(data, team) for _ in range(3)]})
            world.send(team, "post", f"/api/v1/dead-letters/{action}/", body)

        @rule(team=teams, data=st.data(), state=st.sampled_from(GATES),
              collection=st.sampled_from([None, *COLLECTIONS[:5]]), ungate=st.booleans())
        def gate(self, team: FuzzTeam, data: st.DataObject, state: str, collection: str | None,
                 ungate: bool) -> None:
            base = f"/api/v1/lambdas/{self._lambda(data, team)}/"
            if collection is not None:
                base += f"collections/{collection}/"
            gate: dict[str, Any] = {"state": state}
            if data.draw(st.booleans()):
                gate["until"] = time_or_bad(data, data.draw(st.randoms(use_true_random=True)))
            world.send(team, "post", base + "gate/", gate)
            if ungate:
                world.send(team, "post", base + "gate/", {"state": "open"})

        @rule(team=teams, data=st.data())
        def read(self, team: FuzzTeam, data: st.DataObject) -> None:
            paths = ["/api/v1/lambdas/", f"/api/v1/lambdas/{self._lambda(data, team)}/",
                     "/api/v1/stats/", "/metrics", "/api/v1/tokens/", "/api/v1/dead-letters/",
                     "/api/v1/dead-letters/?fields=payload"]
            world.send(team, "get", data.draw(st.sampled_from(paths)))

        @rule(team=teams, data=st.data(), name=st.text(max_size=12) | st.sampled_from(BAD_TEXTS))
        def tokens(self, team: FuzzTeam, data: st.DataObject, name: str) -> None:
            body = {"name": name}
            if data.draw(st.booleans()):
                body["expires_at"] = time_or_bad(data, data.draw(st.randoms(use_true_random=True)))
            made = world.send(team, "post", "/api/v1/tokens/", body)
            if isinstance(made, dict) and "id" in made and data.draw(st.booleans()):
                world.send(team, "post", f"/api/v1/tokens/{made['id']}/revoke/")

        # --- periodic tasks and overrides --------------------------------------------------

        @rule(team=teams, data=st.data(), number=st.integers(0, 3), cron=st.booleans(),
              change=st.sampled_from([None, "patch", "delete"]))
        def periodic_task(self, team: FuzzTeam, data: st.DataObject, number: int, cron: bool,
                          change: str | None) -> None:
            name = f"{team.name}-sched-{number}"
            timing = {"cron": "*/5 * * * *"} if cron else {"interval_s": 60}
            world.send(team, "post", "/api/v1/periodic-tasks/",
                       {"name": name, "lambda": self._lambda(data, team), **timing})
            if change == "patch":
                world.send(team, "patch", f"/api/v1/periodic-tasks/{name}/",
                           {"enabled": data.draw(st.booleans()), "payload": data.draw(JSON)})
            elif change == "delete":
                world.send(team, "delete", f"/api/v1/periodic-tasks/{name}/")

        @rule(team=teams)
        def periodic_name_of_the_other_team(self, team: FuzzTeam) -> None:
            """The other team's name is free here: taking it says nothing of theirs."""
            name = f"{world.other(team).name}-nightly-payroll"
            made = world.send(team, "post", "/api/v1/periodic-tasks/",
                              {"name": name, "lambda": team.lambdas[0], "interval_s": 60})
            if made and "exists" in json.dumps(made):
                world.figures.cross_team.append(f"{team.name} learnt {name!r} exists")
            world.send(team, "delete", f"/api/v1/periodic-tasks/{name}/")
            world.send(team, "patch", f"/api/v1/periodic-tasks/{name}/", {"enabled": False})

        @rule(team=teams, data=st.data(), quota=st.one_of(st.none(), st.floats(0.1, 100)),
              attempts=st.one_of(st.none(), st.integers(1, 9)))
        def override(self, team: FuzzTeam, data: st.DataObject, quota: float | None,
                     attempts: int | None) -> None:
            world.send(team, "patch", f"/api/v1/lambdas/{self._lambda(data, team)}/",
                       {"quota": quota, "max_attempts": attempts})

        # --- remote workers, with the team's worker token ------------------------------------

        def _worker(self, data: st.DataObject, team: FuzzTeam) -> str:
            """Mostly one of the team's workers; sometimes the other team's or an unknown one."""
            rnd = data.draw(st.randoms(use_true_random=True))
            roll = rnd.random()
            own, theirs = team.workers, world.other(team).workers
            if roll < 0.85 and own:
                return rnd.choice(own)
            return rnd.choice(theirs) if roll < 0.95 and theirs else "nobody-host:1:x"

        def _leases(self, data: st.DataObject, team: FuzzTeam) -> list[dict[str, int]]:
            rnd = data.draw(st.randoms(use_true_random=True))
            pool = team.leases if rnd.random() < 0.85 else world.other(team).leases
            return rnd.sample(pool, min(len(pool), rnd.randint(1, 3)))

        @rule(team=teams, data=st.data())
        def register_worker(self, team: FuzzTeam, data: st.DataObject) -> None:
            worker = f"{team.name}-host:{len(team.workers)}:fuzz"
            lambdas = [self._lambda(data, team)]
            made = world.send(team, "post", "/api/v1/worker/register/",
                              {"worker": worker, "host": "h", "pid": 1, "lambdas": lambdas,
                               "threads": 2}, worker=True)
            if isinstance(made, dict) and made.get("worker") == worker:
                team.workers.append(worker)

        @rule(team=teams, data=st.data(), due=st.booleans())
        def claim(self, team: FuzzTeam, data: st.DataObject, due: bool) -> None:
            if due:  # the consumer's passes: due tasks to the queues, periodic occurrences
                world.consumer.run_pass()
                periodic.materialise_due(now=timezone.now())
            answer = world.send(team, "post", "/api/v1/worker/claim/",
                                {"worker": self._worker(data, team), "max": 3, "wait_s": 0},
                                worker=True)
            self._claimed(team, answer)

        def _claimed(self, team: FuzzTeam, answer: Any) -> None:
            for task in (answer or {}).get("tasks", []) if isinstance(answer, dict) else []:
                if task.get("lambda") not in team.lambdas:
                    world.figures.cross_team.append(f"{team.name} claimed task {task}")
                team.leases.append({"id": task["id"], "lease": task["lease"]})
                world.figures.claimed += 1

        @rule(team=teams, data=st.data(),
              call=st.sampled_from(["start", "heartbeat", "finish", "claim", "release"]),
              outcome=st.sampled_from(["success", "retry", "fatal"]))
        def work(self, team: FuzzTeam, data: st.DataObject, call: str, outcome: str) -> None:
            leases = self._leases(data, team)
            if call in ("start", "release"):
                body: dict[str, Any] = {"tasks": leases}
            elif call == "heartbeat":
                body = {"worker": self._worker(data, team), "tasks": leases}
            else:  # finish, or a claim that carries the results
                rnd = data.draw(st.randoms(use_true_random=True))
                body = {"worker": self._worker(data, team), "results": [
                    {**lease, "outcome": outcome, "result": data.draw(JSON),
                     "started_at": time_or_bad(data, rnd),
                     "error": None if outcome == "success" else {
                         "type": "Fuzz", "message": data.draw(st.sampled_from(["m", *BAD_TEXTS])),
                         "traceback": ""}}
                    for lease in leases]}
                if call == "claim":
                    body.update({"max": 3, "start": True})
            answer = world.send(team, "post", f"/api/v1/worker/{call}/", body, worker=True)
            if call == "claim":
                self._claimed(team, answer)

        @rule(team=teams, data=st.data(), index=st.integers(0, len(operations) - 1),
              mode=st.sampled_from(list(schemathesis.GenerationMode)))
        def generated(self, team: FuzzTeam, data: st.DataObject, index: int,
                      mode: schemathesis.GenerationMode) -> None:
            """Any operation, with a body and parameters schemathesis made up."""
            key = (index, mode)
            if key not in strategies:  # building one is slow: once per operation and mode
                strategies[key] = operations[index].as_strategy(generation_mode=mode)
            try:
                case = data.draw(strategies[key])
            except Exception:  # noqa: BLE001 -- nothing to generate (no parameters to break)
                return
            other = world.other(team)
            before = fingerprint(other)
            with keeping_the_connection():
                response = case.call(headers={"Authorization": f"Token {team.token}"})
            request = f"{case.method} {case.formatted_path} {case.body}"
            world.record(team, request, response.status_code, response.content,
                         changed=fingerprint(other) != before)

    return ApiStates


@override_settings(ATF_API_THROTTLE_RATE="")
def test_two_teams_fuzzing_the_api_see_no_5xx_and_nothing_of_each_other(world: World) -> None:
    # Given two teams with lambdas, tasks in every status and tokens
    states = machine(world)
    started = time.monotonic()
    # When random sequences of calls run until CASES requests were made
    while world.figures.cases < CASES:
        # No shrinking: every replay makes its requests again, which takes long; a failure
        # shows its whole sequence instead.
        run_state_machine_as_test(states, settings=settings(
            max_examples=5, stateful_step_count=STEPS, deadline=None, database=None,
            phases=[Phase.generate], suppress_health_check=list(HealthCheck)))
    print(world.figures.summary(time.monotonic() - started))  # `make fuzz` shows it
    # Then no answer was a 5xx, no team saw or changed the other's data
    assert world.figures.server_errors == [], world.figures.server_errors[:10]
    assert world.figures.cross_team == [], world.figures.cross_team[:10]
    # And most POSTs were accepted: the strategies reach the deep paths
    assert world.figures.posts_accepted > world.figures.posts * 0.3, world.figures.by_status
