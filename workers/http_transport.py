"""The remote transport: a worker that reaches ATF only through the worker API, with a token.

Such a host needs neither the store's credentials nor the queues. A failed call (connection,
timeout, 429 or 5xx) raises TransportUnavailable, so the batch writers retry it and the
heartbeat counts it; the API refusing a call (another 4xx) raises ApiRefused.

Against a sharded store, the API answers which of a call's tasks live on a shard it could not
reach (`unreached`): the heartbeat reports them as a direct worker's does (the worker stops that
shard's tasks when its per-shard budget runs out, and keeps the others), and their results are
UNREACHED, written again once the shard is back.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import requests

from tasks_core import store, tracing, waited_results
from tasks_core.conf import atf_settings
from tasks_core.exceptions import AtfError
from tasks_core.states import TaskStatus
from workers.batching import retry_budget_s
from workers.transport import (
    UNREACHED,
    Beat,
    FinishedAttempt,
    Transport,
    TransportUnavailable,
    WorkerInfo,
    Written,
)

logger = logging.getLogger(__name__)

#: Answers that mean "try again": throttled, or the service (or its proxy) is unwell.
_TRANSIENT = frozenset({429, 500, 502, 503, 504})


class ApiRefused(AtfError):
    """The ATF API refused the call (`status`, and the field errors of a 400 in `fields`)."""

    def __init__(self, message: str, *, status: int = 0, fields: frozenset[str] = frozenset()
                 ) -> None:
        super().__init__(message)
        self.status = status
        self.fields = fields


def _field_errors(response: requests.Response) -> frozenset[str]:
    """The fields a 400 answer names (the API's field errors are an object by field)."""
    try:
        body = response.json()
    except ValueError:
        return frozenset()
    return frozenset(body) if isinstance(body, dict) else frozenset()


def call_timeout_s(api_timeout_s: float) -> float:
    """Seconds a call of a working worker (other than a heartbeat, or a claim's wait) may take:
    ATF_API_TIMEOUT_S, at most half the heartbeat budget, so that a call stuck on a dead
    connection leaves time for another on a fresh one before the budget ends. The calls of its
    start-up (lambdas/, register/) hold no task yet and may take all of ATF_API_TIMEOUT_S."""
    return min(api_timeout_s, retry_budget_s() / 2)


def _leases(tasks: Sequence[store.ClaimedTask]) -> list[dict[str, int]]:
    return [{"id": task.task_id, "lease": task.lease} for task in tasks]


def _result(task: store.ClaimedTask, result: store.Result) -> dict[str, Any]:
    return {"id": task.task_id, "lease": task.lease, "outcome": str(result.outcome),
            "result": result.value, "error": result.error, "delay_s": result.delay_s,
            "started_at": result.started_at.isoformat() if result.started_at else None}


def _statuses(answer: Mapping[str, Any], done: Sequence[FinishedAttempt],
              ) -> list[Written]:
    """Each result's status in the API's answer (finish/'s, or a claim's that carried them):
    UNREACHED for those of a shard it could not reach."""
    statuses = {item["id"]: item["status"] for item in answer.get("results", ())}
    unreached = set(answer.get("unreached", ()))
    return [UNREACHED if task.task_id in unreached
            else None if statuses.get(task.task_id) is None
            else TaskStatus(statuses[task.task_id]) for task, _result in done]


class HttpTransport(Transport):
    """The ATF API at `url`, as the holder of a worker token."""

    def __init__(self, *, url: str, token: str, claim_wait_s: float, timeout_s: float) -> None:
        super().__init__()
        self.base_url = url.rstrip("/") + "/api/v1/worker/"
        self.claim_wait_s = claim_wait_s
        self.start_timeout_s = timeout_s  #: before it holds a task: no budget to keep
        self.timeout_s = call_timeout_s(timeout_s)
        if self.timeout_s < timeout_s:
            logger.info("API calls time out after %.1fs, not ATF_API_TIMEOUT_S=%.1fs: half the "
                        "heartbeat budget of %.1fs", self.timeout_s, timeout_s, retry_budget_s())
        self._headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
        self._local = threading.local()  # one session (connection pool) per thread
        self._sessions: list[requests.Session] = []
        self._lock = threading.Lock()

    def _session(self) -> requests.Session:
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = requests.Session()
            with self._lock:
                self._sessions.append(session)
        return session

    def _post(self, path: str, body: Mapping[str, Any], *,
              timeout_s: float | None = None) -> dict[str, Any]:
        url = self.base_url + path
        try:
            response = self._session().post(
                url, data=json.dumps(body, allow_nan=False), headers=self._headers,
                timeout=timeout_s or self.timeout_s)
        except requests.RequestException as exc:
            raise TransportUnavailable(f"cannot reach the ATF API at {url}: {exc}") from exc
        if response.status_code in _TRANSIENT:
            raise TransportUnavailable(f"the ATF API answered {response.status_code} to {url}")
        if response.status_code >= 400:
            raise ApiRefused(f"the ATF API refused {url}: {response.status_code} "
                             f"{response.text[:500]}", status=response.status_code,
                             fields=_field_errors(response) if response.status_code == 400
                             else frozenset())
        try:
            return response.json()
        except ValueError as exc:
            raise TransportUnavailable(f"the ATF API sent no JSON to {url}") from exc

    def _worker_id(self) -> str:
        assert self.worker is not None, "register() comes first"
        return self.worker.worker_id

    def heartbeat_timeouts_s(self, lambda_names: Sequence[str]) -> dict[str, float]:
        answer = self._post("lambdas/", {"lambdas": list(lambda_names)},
                            timeout_s=self.start_timeout_s)
        return {item["name"]: item["heartbeat_timeout_s"] for item in answer["lambdas"]}

    def register(self, worker: WorkerInfo) -> None:
        super().register(worker)
        self._post("register/", {"worker": worker.worker_id, "host": worker.host,
                                 "pid": worker.pid, "lambdas": list(worker.lambdas),
                                 "threads": worker.threads},
                   timeout_s=self.start_timeout_s)

    def claim(self, max_count: int) -> list[store.ClaimedTask]:
        return self._claim(max_count, wait_s=self.claim_wait_s)[1]

    def finish_and_claim(self, done: Sequence[FinishedAttempt], max_count: int,
                         ) -> tuple[list[Written], list[store.ClaimedTask]]:
        try:
            return self._claim(max_count, wait_s=0, done=done)
        except ApiRefused as exc:
            if exc.fields == {"results"}:  # an API older than claims with results
                logger.warning("the ATF API takes no results with a claim (an older release): "
                               "results go through finish/ from now on")
                self.carries_results = False
                raise TransportUnavailable(str(exc)) from exc
            raise

    def _claim(self, max_count: int, *, wait_s: float, done: Sequence[FinishedAttempt] = (),
               ) -> tuple[list[Written], list[store.ClaimedTask]]:
        """A claim request, carrying `done`'s results when there are any (the API records
        them in the claim's commit and answers them as finish/ does)."""
        body: dict[str, Any] = {"worker": self._worker_id(), "max": max_count,
                                "wait_s": wait_s, "start": True}
        if done:
            body["results"] = [_result(task, result) for task, result in done]
        if tracing.ENABLED:
            body["trace"] = True  # each task's trace context, for its attempt's span
        answer = self._post("claim/", body, timeout_s=wait_s + self.timeout_s)
        return (_statuses(answer, done),
                [store.ClaimedTask.from_json(item) for item in answer["tasks"]])

    def heartbeat(self, leases: Mapping[int, int], *, seen: bool = True) -> Beat:
        # At most one interval: a call stuck on a connection the server no longer reads (an
        # API process draining for a restart) leaves time to retry on a fresh one.
        answer = self._post("heartbeat/", {
            "worker": self._worker_id(), "seen": seen,
            "tasks": [{"id": pk, "lease": lease} for pk, lease in leases.items()]},
            timeout_s=min(self.timeout_s, atf_settings.heartbeat_interval_s))
        return Beat(lost=set(answer["lost"]), cancel=set(answer.get("cancel", ())),
                    unreached=set(answer.get("unreached", ())))

    def finish_many(self, done: Sequence[FinishedAttempt]) -> list[Written]:
        answer = self._post("finish/", {"worker": self._worker_id(),
                                        "results": [_result(t, r) for t, r in done]})
        return _statuses(answer, done)

    def release(self, tasks: Sequence[store.ClaimedTask]) -> int:
        if not tasks:
            return 0
        return int(self._post("release/", {"tasks": _leases(tasks)})["released"])

    @property
    def task_link(self) -> HttpTransport:  # type: ignore[override]
        return self  # a remote worker's tasks reach the store through the API too

    def parent_results(self, task_id: int) -> list[Any]:
        """Page after page from the worker API (parent-results/)."""
        return waited_results.all_results(lambda after: self._post(
            "parent-results/", {"id": task_id, "after": after})["results"])

    def recorded_steps(self, task_id: int, lease: int) -> dict[str, Any]:
        answer = self._post("steps/", {"id": task_id, "lease": lease})
        return {step["name"]: step["result"] for step in answer["steps"]}

    def report_progress(self, task_id: int, done: float, total: float | None,
                        note: str) -> None:
        self._post("progress/", {"id": task_id, "done": done, "total": total, "note": note})

    def record_step(self, task_id: int, lease: int, name: str, value: Any, size: int) -> str:
        answer = self._post("step/", {"id": task_id, "lease": lease, "name": name,
                                      "result": value})
        return str(answer["step"])

    def deregister(self) -> None:
        if self.worker is not None:
            self._post("stopped/", {"worker": self.worker.worker_id})

    def reset(self) -> None:
        session = getattr(self._local, "session", None)
        if session is not None:
            session.close()  # its pooled connections may be half-dead after a failure

    def close(self) -> None:
        with self._lock:
            for session in self._sessions:
                session.close()
