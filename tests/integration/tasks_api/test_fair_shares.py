"""Fair shares: one team flooding the API cannot shut another team out of it.

The flood runs against the API under gunicorn with the project's config (gthread, its shares
sized from its threads), the way remote workers reach it.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest
import redis
import requests

from tasks_core import atf, queues
from tasks_core.models import Team
from tests.conftest import Processes, subprocess_env, wait_for
from tests.factories import LambdaFactory
from tests.remote import start_api, worker_token
from workers.consumer import Consumer

pytestmark = [pytest.mark.django_db(transaction=True)]

#: Threads of the API process under test: its shares are fractions of these.
THREADS = 16
#: Concurrent waiting claims team A sends: far more than the process has threads.
FLOOD = 4 * THREADS


class Tenant:
    """A team with a lambda, a worker token and a registered remote worker."""

    def __init__(self, url: str, name: str, *, threads: int = 1) -> None:
        self.url = url
        self.token = worker_token(name)
        self.lambda_name = f"{name}.work"
        LambdaFactory(name=self.lambda_name, team=Team.objects.get(name=name))
        self.worker = f"{name}-host:1:w"
        answer = self.post("register/", {"worker": self.worker, "host": "h", "pid": 1,
                                         "lambdas": [self.lambda_name], "threads": threads})
        assert answer.status_code == 201, answer.text

    def post(self, path: str, body: dict, *, timeout_s: float = 30) -> requests.Response:
        return requests.post(f"{self.url}/api/v1/worker/{path}", json=body, timeout=timeout_s,
                             headers={"Authorization": f"Token {self.token}"})

    def claim(self, *, wait_s: float, timeout_s: float = 30) -> requests.Response:
        return self.post("claim/", {"worker": self.worker, "max": 1, "wait_s": wait_s},
                         timeout_s=timeout_s)


class Flood:
    """FLOOD threads of one team, each sending waiting claims until stopped."""

    def __init__(self, tenant: Tenant) -> None:
        self.tenant = tenant
        self.answers: Counter[int] = Counter()  #: status codes so far (0: no answer)
        self.refusals: Counter[str] = Counter()  #: the 429s' details
        self.in_flight = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._claim_again) for _ in range(FLOOD)]
        for thread in self._threads:
            thread.start()

    def _claim_again(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                self.in_flight += 1
            try:
                answer = self.tenant.claim(wait_s=6)
                code, detail = answer.status_code, answer.text
            except requests.RequestException:
                code, detail = 0, ""
            with self._lock:
                self.in_flight -= 1
                self.answers[code] += 1
                if code == 429:
                    self.refusals[detail] += 1
            if code == 429:
                self._stop.wait(0.05)

    def under_way(self) -> bool:
        """The flood holds the server: its claims wait there, or are refused."""
        with self._lock:
            return self.in_flight >= THREADS or self.answers[429] > 0

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)


@pytest.fixture
def api(processes: Processes, redis_client: redis.Redis, transactional_db: None) -> str:
    return start_api(processes, subprocess_env(), threads=THREADS)


@pytest.fixture
def flood(api: str) -> Iterator[Flood]:
    # A worker of as many threads as claims: its bound on held tasks is not what refuses them
    running = Flood(Tenant(api, "flooda", threads=FLOOD))
    yield running
    running.stop()


def test_another_teams_claim_is_answered_while_one_team_floods_long_polls(
        api: str, flood: Flood) -> None:
    # Given team A's 64 claims that would wait 6 s each (the server has 16 threads), and team
    # B's task in its queue
    wait_for(flood.under_way, message="team A's flood to reach the server")
    team_b = Tenant(api, "floodb")
    task = atf.schedule(team_b.lambda_name, {})
    queue = queues.backend()
    Consumer(batch_size=10, poll_interval_s=0.1, queue=queue).run_pass()
    queue.close()
    # When team B claims
    started = time.monotonic()
    answer = team_b.claim(wait_s=1, timeout_s=15)
    took_s = time.monotonic() - started
    # Then it gets its task at once, not after A's claims time out (nor a 503)
    assert answer.status_code == 200, answer.text
    assert [claimed["id"] for claimed in answer.json()["tasks"]] == [task.pk]
    assert took_s < 3.0
    # And team A was told which of its shares it had used up: its waiting claims (2, an
    # eighth of the threads) or its requests in progress (4, a quarter of them)
    assert not flood.answers[503]
    assert any("ATF_API_WAITING_CLAIMS_PER_TEAM allows 2 per" in d for d in flood.refusals)
    assert any("ATF_API_CONCURRENT_PER_TEAM allows 4 per" in d for d in flood.refusals)


def test_a_waiting_claim_leaves_its_teams_share_of_requests_in_progress(
        processes: Processes, redis_client: redis.Redis, transactional_db: None) -> None:
    # Given an API where a team may have one request in progress, and team A's claim waiting
    # for a task (one more client blocked in Redis than before it was sent)
    api = start_api(processes, subprocess_env(ATF_API_CONCURRENT_PER_TEAM="1"), threads=THREADS)
    tenant = Tenant(api, "waitera")
    db = str(redis_client.connection_pool.connection_kwargs.get("db", 0))

    def blocked() -> int:
        return sum(client["cmd"] == "blmpop" and client["db"] == db
                   for client in redis_client.client_list())

    before = blocked()
    waiting = threading.Thread(target=tenant.claim, kwargs={"wait_s": 10})
    waiting.start()
    wait_for(lambda: blocked() > before, message="team A's claim to wait")

    # When team A sends another request meanwhile
    def served_while_the_claim_waits() -> bool:
        answer = tenant.post("lambdas/", {"lambdas": [tenant.lambda_name]})
        return answer.status_code == 200 and waiting.is_alive()

    # Then it is served while the claim still waits (the claim held the team's one share)
    wait_for(served_while_the_claim_waits, timeout_s=8, interval_s=0.2,
             message="team A's request to be served while its claim waits")
    waiting.join(timeout=30)
