"""A typed client of the ATF REST API, for services that are not Django projects.

    from atf_client import Client
    with Client("https://atf.example.com", token) as atf:
        task = atf.schedule("billing.send_invoice", {"order": 7}, priority="high")
        atf.get(task.id).status
"""

from __future__ import annotations

#: The version of the atf-client distribution (clients/python/pyproject.toml reads it); it
#: follows django-atf's (tasks_core.__version__).
__version__ = "0.2.0.dev0"

from atf_client.client import Client
from atf_client.errors import (
    ApiError,
    AtfClientError,
    Conflict,
    Forbidden,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    ServerError,
    Throttled,
    TransportError,
    Unauthorized,
    Unavailable,
)
from atf_client.models import Call, Task
from atf_client.retries import NO_RETRIES, RetryPolicy

__all__ = [
    "NO_RETRIES", "ApiError", "AtfClientError", "Call", "Client", "Conflict", "Forbidden",
    "InvalidRequest", "NotFound", "PayloadTooLarge", "RetryPolicy", "ServerError", "Task",
    "Throttled", "TransportError", "Unauthorized", "Unavailable", "__version__",
]
