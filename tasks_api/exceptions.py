"""Domain errors as HTTP answers, in one place; and JSON error pages for the API's URLs.

InvalidTask -> 400 with its field errors; InvalidTransition -> 409; TaskNotFound,
LambdaNotFound and WorkerNotFound -> 404; WorkerExists -> 409; LimitReached -> 429;
QueueUnavailable and an unreachable database -> 503; an idempotency key that a concurrent
request inserted first -> 409 (retrying returns the existing task); a body over
DATA_UPLOAD_MAX_MEMORY_SIZE -> 413.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import IntegrityError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from rest_framework import exceptions, status
from rest_framework.response import Response

from tasks_core.exceptions import (
    InvalidTask,
    InvalidTransition,
    LambdaNotFound,
    LimitReached,
    QueueUnavailable,
    TaskNotFound,
    WorkerExists,
    WorkerNotFound,
)
from tasks_core.limits import bad_text

logger = logging.getLogger(__name__)

#: Paths whose error pages are JSON, never HTML.
API_PREFIXES = ("/api/", "/healthz", "/readyz", "/metrics")


class Conflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "The request conflicts with the task's current state."
    default_code = "conflict"


class ServiceUnavailable(exceptions.APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "A service ATF needs is unavailable; try again later."
    default_code = "service_unavailable"


class DatabaseUnavailable(ServiceUnavailable):
    """The store (or the one shard a request needs: its task's, its key's) cannot be reached:
    answered with `Retry-After`, the seconds before it is worth trying again."""

    retry_after_s = 5


class LimitExceeded(exceptions.APIException):
    status_code = status.HTTP_429_TOO_MANY_REQUESTS
    default_detail = "A limit of your team is reached."
    default_code = "limit_reached"


class RequestTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request body is too large."
    default_code = "request_too_large"


def _translate(exc: Exception) -> Exception:
    if isinstance(exc, RequestDataTooBig):
        return RequestTooLarge(
            f"The request body is over the limit of {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes.")
    if isinstance(exc, InvalidTask):
        return exceptions.ValidationError(exc.errors)
    if isinstance(exc, InvalidTransition):
        return Conflict(str(exc))
    if isinstance(exc, TaskNotFound | LambdaNotFound | WorkerNotFound):
        return exceptions.NotFound(str(exc))
    if isinstance(exc, WorkerExists):
        return Conflict(str(exc))
    if isinstance(exc, LimitReached):
        return LimitExceeded(str(exc))
    if isinstance(exc, QueueUnavailable):
        logger.warning("queue unavailable: %s", exc)
        return ServiceUnavailable("The queue service is unavailable; try again later.")
    if isinstance(exc, IntegrityError):
        logger.info("integrity error answered 409: %s", exc)
        return Conflict("A concurrent request wrote the same task; retry to get it.")
    if isinstance(exc, OperationalError):
        logger.warning("database unavailable: %s", exc)
        return DatabaseUnavailable("The database is unavailable; try again later.")
    return exc


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's handler, after turning ATF's errors into API exceptions."""
    from rest_framework import views  # not at the top: rest_framework.views imports our parser

    translated = _translate(exc)
    response = views.exception_handler(translated, context)
    if response is not None:
        response.data = _encodable(response.data)
        if isinstance(translated, DatabaseUnavailable):
            response["Retry-After"] = str(translated.retry_after_s)
    return response


def _encodable(data: Any) -> Any:
    """An error answer whose text can be written as UTF-8: errors may echo what a request
    sent (an unknown field's name, a refused choice), lone surrogates included, which are
    written escaped ("\\ud800") rather than fail the answer."""
    if isinstance(data, str):
        return data.encode("utf-8", "backslashreplace").decode("utf-8") if bad_text(data) \
            else data
    if isinstance(data, dict):
        return {_encodable(key): _encodable(value) for key, value in data.items()}
    if isinstance(data, list):
        return [_encodable(item) for item in data]
    return data


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith(API_PREFIXES)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    if _is_api(request):
        return JsonResponse({"detail": "Bad request."}, status=400)
    return defaults.bad_request(request, exception)


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    if _is_api(request):
        return JsonResponse({"detail": "You do not have permission to perform this action."},
                            status=403)
    return defaults.permission_denied(request, exception)


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if _is_api(request):
        return JsonResponse({"detail": "Not found."}, status=404)
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    if _is_api(request):
        return JsonResponse({"detail": "Internal server error."}, status=500)
    return defaults.server_error(request)
