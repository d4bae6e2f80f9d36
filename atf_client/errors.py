"""What the ATF API answered when it did not do what was asked, as exceptions."""

from __future__ import annotations

from typing import Any


class AtfClientError(Exception):
    """The request failed."""


class TransportError(AtfClientError):
    """The server could not be reached, or answered something that is not the ATF API."""


class ApiError(AtfClientError):
    """The API refused the request. `status` is the HTTP status, `detail` its message, and
    `errors` the field errors (`{"priority": ["Unknown priority ..."]}`; in a batch the field
    is named `tasks[i].field`), empty when the answer had none. `retry_after_s` is the
    server's Retry-After on a 429 or 503 (None when not said)."""

    status: int = 0
    retry_after_s: float | None = None

    def __init__(self, status: int, body: Any) -> None:
        self.status = status
        self.body = body
        self.detail = ""
        self.errors: dict[str, list[str]] = {}
        if isinstance(body, dict) and isinstance(body.get("detail"), str):
            self.detail = body["detail"]
        elif isinstance(body, dict):
            self.errors = {str(field): _messages(value) for field, value in body.items()}
            self.detail = "; ".join(f"{field}: {' '.join(msgs)}"
                                    for field, msgs in self.errors.items())
        else:
            self.detail = str(body)[:200]
        super().__init__(f"{status}: {self.detail}")


def _messages(value: Any) -> list[str]:
    if isinstance(value, list):
        return [str(item) for item in value]
    return [str(value)]


class InvalidRequest(ApiError):
    """400: the request is not valid; `errors` says which fields and why."""


class Unauthorized(ApiError):
    """401: no token, or a token the server does not know."""


class Forbidden(ApiError):
    """403: the token may not do this (e.g. a worker token outside the worker API)."""


class NotFound(ApiError):
    """404: no such task or lambda, or not the token's team's."""


class Conflict(ApiError):
    """409: the task's status does not allow it (e.g. cancelling a finished task)."""


class PayloadTooLarge(ApiError):
    """413: the request body is over the server's limit."""


class Throttled(ApiError):
    """429: too many requests, after the client's retries; `retry_after_s` says when to try
    again (None when not said)."""


class Unavailable(ApiError):
    """503: the server's database or queue is unavailable, after the client's retries."""


class ServerError(ApiError):
    """Any other answer that is not a success."""


BY_STATUS: dict[int, type[ApiError]] = {
    400: InvalidRequest, 401: Unauthorized, 403: Forbidden, 404: NotFound, 409: Conflict,
    413: PayloadTooLarge, 429: Throttled, 503: Unavailable,
}
