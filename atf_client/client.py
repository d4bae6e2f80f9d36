"""A client of the ATF REST API for programs that are not Django projects (needs `requests`)."""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from types import TracebackType
from typing import Any
from urllib.parse import quote, urlsplit

import requests

from atf_client import errors
from atf_client.models import Call, Task
from atf_client.retries import RETRIED_STATUSES, RetryPolicy

logger = logging.getLogger(__name__)

JSON = dict[str, Any]


def api_url(url: str) -> str:
    """The API's URL from the base URL `runworker --api` takes (`https://atf.example.com`; a
    host project's `https://shop.example.com/atf`): `api/` is added. A URL that already ends
    in `/api` (or `/api/`) is the API's own and is kept."""
    url = url.rstrip("/")
    return url + "/" if urlsplit(url).path.endswith("/api") else url + "/api/"


class Client:
    """Schedules, follows and operates tasks through the ATF API.

    `url` is the base URL `runworker --api` takes: `https://atf.example.com` for the standalone
    service, `https://shop.example.com/atf` for a host project that includes `tasks_api.urls`
    at `atf/api/` (the API's own URL, ending in `/api/`, works too). `token` is an API token
    (`manage.py atf_token TEAM USER`). A 429 or 503 answer is tried again after the server's
    `Retry-After`, else a backoff (`retries`; `retries.NO_RETRIES` turns it off). Every method
    raises an `errors.ApiError` subclass when the API refuses, `errors.TransportError` when
    the server cannot be reached.
    """

    def __init__(self, url: str, token: str, *, timeout: float = 10.0,
                 session: requests.Session | None = None,
                 retries: RetryPolicy = RetryPolicy(),  # noqa: B008 - frozen, shared safely
                 sleep: Callable[[float], None] = time.sleep,
                 timeout_s: float | None = None) -> None:
        """`timeout`: seconds to wait for each answer (`timeout_s` is its older name)."""
        self.url = api_url(url)
        if timeout_s is not None:
            _deprecated("Client(timeout_s=...)", "timeout=...")
            timeout = timeout_s
        self.timeout = timeout
        self.retries = retries
        self.sleep = sleep
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
        """Cancel a task; a running one is asked to stop (it comes back still `processing`,
        with `cancel_requested_at` in its data, and ends `cancelled`). errors.Conflict once
        it finished."""
        return Task.from_json(self._request("POST", f"v1/tasks/{int(task_id)}/cancel/"))

    def tasks(self, **filters: str) -> Iterator[Task]:
        """Every task the filters select (`lambda_name`, `collection`, `status`, `priority`,
        `worker`), newest first, page after page."""
        query = {("lambda" if key == "lambda_name" else key): value
                 for key, value in filters.items()}
        for item in self._pages("v1/tasks/", query):
            yield Task.from_json(item)

    # --- operators ----------------------------------------------------------------------

    def requeue(self, task_id: int) -> Task:
        """A task that ended without success back to `new`, attempts reset."""
        return Task.from_json(self._request("POST", f"v1/tasks/{int(task_id)}/requeue/"))

    def run_now(self, task_id: int) -> Task:
        """A delayed or retrying task due now."""
        return Task.from_json(self._request("POST", f"v1/tasks/{int(task_id)}/run-now/"))

    def set_gate(self, lambda_name: str, state: str, *, collection: str | None = None,
                 until: datetime | None = None) -> JSON:
        """Open, pause or drop a lambda (or one of its collections); the gated lambda or
        collection. `until` reopens a closed gate by itself."""
        path = f"v1/lambdas/{_segment(lambda_name)}/"
        if collection is not None:
            path += f"collections/{_segment(collection)}/"
        body: JSON = {"state": state}
        if until is not None:
            body["until"] = until.isoformat()
        return self._request("POST", path + "gate/", body)

    def lambda_info(self, lambda_name: str) -> JSON:
        """A lambda: its gate, collections, queue depths, counts and options with sources."""
        return self._request("GET", f"v1/lambdas/{_segment(lambda_name)}/")

    def set_options(self, lambda_name: str, **changes: float | None) -> JSON:
        """Operator overrides of a lambda's options (`quota`, `max_attempts`, `timeout`,
        `heartbeat_timeout`, `backoff_base`, `backoff_cap`); None clears one."""
        return self._request("PATCH", f"v1/lambdas/{_segment(lambda_name)}/", changes)

    def dead_letters(self, *, lambda_name: str | None = None,
                     collection: str | None = None) -> Iterator[Task]:
        """The dead tasks, page after page."""
        query = {key: value for key, value in (("lambda", lambda_name),
                                               ("collection", collection)) if value}
        for item in self._pages("v1/dead-letters/", query):
            yield Task.from_json(item)

    def requeue_dead(self, *, ids: Iterable[int] | None = None, lambda_name: str | None = None,
                     collection: str | None = None) -> int:
        """Dead tasks back to `new` (by ids, or by lambda and collection); how many."""
        body = _selection(ids, lambda_name, collection)
        return int(self._request("POST", "v1/dead-letters/requeue/", body)["requeued"])

    def discard_dead(self, *, ids: Iterable[int] | None = None, lambda_name: str | None = None,
                     collection: str | None = None) -> int:
        """Delete dead tasks for good (by ids, or by lambda and collection); how many."""
        body = _selection(ids, lambda_name, collection)
        return int(self._request("POST", "v1/dead-letters/discard/", body)["discarded"])

    def periodic_tasks(self) -> list[JSON]:
        """The periodic tasks of the token's teams."""
        return list(self._pages("v1/periodic-tasks/", {}))

    def add_periodic(self, name: str, lambda_name: str, **fields: Any) -> JSON:
        """A new periodic task (`cron` or `interval` in seconds, `timezone`, `payload`,
        `collection`, `priority`, `catch_up`, `enabled`)."""
        return self._request("POST", "v1/periodic-tasks/",
                             {"name": name, "lambda": lambda_name, **_periodic(fields)})

    def change_periodic(self, name: str, **changes: Any) -> JSON:
        return self._request("PATCH", f"v1/periodic-tasks/{_segment(name)}/",
                             _periodic(changes))

    def delete_periodic(self, name: str) -> None:
        self._request("DELETE", f"v1/periodic-tasks/{_segment(name)}/")

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def _pages(self, path: str, query: dict[str, str]) -> Iterator[JSON]:
        """The items of a list, following its `next` links (a list may also be a bare array)."""
        answer = self._request("GET", path, params=query)
        while True:
            if isinstance(answer, list):
                yield from answer
                return
            yield from answer.get("results", [])
            if not answer.get("next"):
                return
            answer = self._request("GET", answer["next"])

    def _request(self, method: str, path: str, body: Any = None, *,
                 params: dict[str, str] | None = None) -> Any:
        """One API call, tried again after a 429 or 503 as the retry policy says."""
        url = path if path.startswith(("http://", "https://")) else self.url + path
        for retry in range(self.retries.attempts + 1):
            try:
                return self._once(method, url, body, params)
            except (errors.Throttled, errors.Unavailable) as exc:
                if retry >= self.retries.attempts:
                    raise
                wait_s = self.retries.wait_s(retry + 1, exc.retry_after_s)
                logger.info("%s %s answered %s; trying again in %.1fs", method, url,
                            exc.status, wait_s)
                self.sleep(wait_s)
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def _once(self, method: str, url: str, body: Any, params: dict[str, str] | None) -> Any:
        status, answer, retry_after = self._answer(method, url, body, params)
        if status == 204:
            return {}
        if status < 400 and isinstance(answer, dict | list):
            return answer
        if status < 400:
            raise errors.TransportError(
                f"{method} {url}: answer is not JSON (is the URL the API's?)")
        error = errors.BY_STATUS.get(status, errors.ServerError)(status, answer)
        if status in RETRIED_STATUSES:
            error.retry_after_s = _seconds(retry_after)
        logger.debug("%s %s answered %s", method, url, error)
        raise error

    def _answer(self, method: str, url: str, body: Any, params: dict[str, str] | None
                ) -> tuple[int, Any, str | None]:
        """The status, the body (JSON, else text) and the Retry-After of one answer. The
        response ends with this call: in the frame that raises an error for it, the error's
        traceback would keep it, and its connection open (the server's thread for it too, with
        that thread's database connection) for as long as the error lives, which is until the
        garbage collector runs if the error is kept in a reference cycle."""
        try:
            response = self.session.request(method, url, json=body, params=params,
                                            timeout=self.timeout)
        except requests.RequestException as exc:
            raise errors.TransportError(f"{method} {url}: {exc}") from exc
        try:
            answer = response.json()
        except ValueError:
            answer = response.text
        return response.status_code, answer, response.headers.get("Retry-After")


def _segment(name: str) -> str:
    """`name` as one segment of a URL path."""
    return quote(name, safe="")


def _selection(ids: Iterable[int] | None, lambda_name: str | None,
               collection: str | None) -> JSON:
    if ids is not None:
        return {"ids": [int(pk) for pk in ids]}
    return {key: value for key, value in (("lambda", lambda_name), ("collection", collection))
            if value is not None}


def _seconds(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def _deprecated(old: str, new: str) -> None:
    warnings.warn(f"{old} is deprecated: use {new} (seconds)", DeprecationWarning, stacklevel=3)


def _periodic(fields: dict[str, Any]) -> dict[str, Any]:
    """A periodic task's fields, `interval_s` (deprecated) given as `interval`."""
    if "interval_s" not in fields:
        return fields
    _deprecated("interval_s=...", "interval=...")
    renamed = {key: value for key, value in fields.items() if key != "interval_s"}
    renamed.setdefault("interval", fields["interval_s"])
    return renamed
