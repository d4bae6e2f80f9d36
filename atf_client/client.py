"""A client of the ATF REST API for programs that are not Django projects (needs `requests`)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime
from types import TracebackType
from typing import Any

import requests

from atf_client import errors
from atf_client.models import Call, Task

logger = logging.getLogger(__name__)


class Client:
    """Schedules and follows tasks through the API mounted at `url`.

    `url` is where the project mounts `tasks_api.urls`: `https://atf.example.com/api/` for the
    standalone service, `https://shop.example.com/atf/api/` for a host project that includes it
    at `atf/api/`. `token` is an API token (`manage.py atf_token TEAM USER`). Every method
    raises an `errors.ApiError` subclass when the API refuses, `errors.TransportError` when the
    server cannot be reached.
    """

    def __init__(self, url: str, token: str, *, timeout_s: float = 10.0,
                 session: requests.Session | None = None) -> None:
        self.url = url.rstrip("/") + "/"
        self.timeout_s = timeout_s
        self.session = session or requests.Session()
        self.session.headers.update({"Authorization": f"Token {token}",
                                     "Accept": "application/json"})

    def schedule(self, lambda_name: str, payload: Any = None, *, collection: str | None = None,
                 priority: str | None = None, run_at: datetime | None = None,
                 delay: float | None = None, idempotency_key: str | None = None,
                 max_attempts: int | None = None, timeout: float | None = None,
                 after: Iterable[int] = (), delay_s: float | None = None) -> Task:
        """Schedule one task; with an idempotency key used before, the task it created then.
        `delay_s` is the older name of `delay` (deprecated)."""
        call = Call(lambda_name=lambda_name, payload=payload, collection=collection,
                    priority=priority, run_at=run_at, delay=delay,
                    idempotency_key=idempotency_key, max_attempts=max_attempts,
                    timeout=timeout, after=tuple(after), delay_s=delay_s)
        return Task.from_json(self._request("POST", "v1/tasks/", call.to_json()))

    def schedule_many(self, calls: Iterable[Call]) -> list[Task]:
        """Schedule every call or none (the first invalid one fails the whole batch)."""
        body = {"tasks": [call.to_json() for call in calls]}
        answer = self._request("POST", "v1/tasks/batch/", body)
        return [Task.from_json(item) for item in answer["tasks"]]

    def get(self, task_id: int) -> Task:
        return Task.from_json(self._request("GET", f"v1/tasks/{int(task_id)}/"))

    def cancel(self, task_id: int) -> Task:
        """Cancel a task that has not started; errors.Conflict once it has."""
        return Task.from_json(self._request("POST", f"v1/tasks/{int(task_id)}/cancel/"))

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def _request(self, method: str, path: str, body: Any = None) -> Any:
        try:
            response = self.session.request(method, self.url + path, json=body,
                                            timeout=self.timeout_s)
        except requests.RequestException as exc:
            raise errors.TransportError(f"{method} {self.url}{path}: {exc}") from exc
        try:
            answer = response.json()
        except ValueError:
            answer = response.text
        if response.ok and isinstance(answer, dict):
            return answer
        if response.ok:
            raise errors.TransportError(
                f"{method} {self.url}{path}: answer is not a JSON object (is the URL the API's?)")
        error = errors.BY_STATUS.get(response.status_code, errors.ServerError)(
            response.status_code, answer)
        if isinstance(error, errors.Throttled):
            error.retry_after_s = _seconds(response.headers.get("Retry-After"))
        logger.debug("%s %s answered %s", method, path, error)
        raise error


def _seconds(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None
