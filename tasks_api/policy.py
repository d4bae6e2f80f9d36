"""The API's own DRF policy, so that it holds in any project whatever its REST_FRAMEWORK says.

A host project's defaults (its authentication, an AllowAny permission, its renderers, its
pagination, filters or versioning, its schema class, its error handler) never reach ATF's
views: each view takes all of them from `ApiPolicy` (or sets its own, as the probes and the
schema views do), built from `tasks_api.defaults.REST_FRAMEWORK`. What DRF reads from
REST_FRAMEWORK for every view alike (date formats, the non-field errors key) cannot be kept per
view: `tasks_api.checks` warns about those (atf.W003).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from django.utils.module_loading import import_string
from rest_framework.authentication import BaseAuthentication
from rest_framework.filters import BaseFilterBackend
from rest_framework.metadata import BaseMetadata, SimpleMetadata
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.pagination import BasePagination
from rest_framework.parsers import BaseParser
from rest_framework.renderers import BaseRenderer
from rest_framework.throttling import BaseThrottle
from rest_framework.versioning import BaseVersioning

from tasks_api import admission, fair_share
from tasks_api.defaults import REST_FRAMEWORK
from tasks_api.renderers import PlainNegotiation

if TYPE_CHECKING:
    from django.http import HttpRequest, HttpResponseBase
    from rest_framework.generics import BaseFilterProtocol
    from rest_framework.permissions import _PermissionClass
    from rest_framework.request import Request
    from rest_framework.views import APIView

    _View = APIView
else:
    _View = object


def _classes(key: str) -> list[Any]:
    # import_string() is untyped: each attribute below declares what its list holds.
    return [import_string(path) for path in REST_FRAMEWORK[key]]


class ApiPolicy(_View):
    """Put first among a view's bases: its attributes come before APIView's project defaults.

    An authenticated request also holds its team's and its token's share of the process
    (tasks_api.fair_share), then waits for its team's turn to run (tasks_api.admission), from
    the checks of `initial` until its response is finalised, whatever the answer (a 500
    included).
    """

    _held_shares: list[fair_share.Share] | None = None
    #: (team key, since) of its turn to run, while it holds one.
    _turn: tuple[str, float] | None = None

    authentication_classes: Sequence[type[BaseAuthentication]] = _classes(
        "DEFAULT_AUTHENTICATION_CLASSES")
    permission_classes: Sequence[_PermissionClass] = _classes("DEFAULT_PERMISSION_CLASSES")
    parser_classes: Sequence[type[BaseParser]] = _classes("DEFAULT_PARSER_CLASSES")
    renderer_classes: Sequence[type[BaseRenderer]] = _classes("DEFAULT_RENDERER_CLASSES")
    throttle_classes: Sequence[type[BaseThrottle]] = _classes("DEFAULT_THROTTLE_CLASSES")
    content_negotiation_class: type[BaseContentNegotiation] = PlainNegotiation
    metadata_class: str | type[BaseMetadata] | None = SimpleMetadata
    versioning_class: type[BaseVersioning] | None = None
    # A list view names its own pagination; filters are its query serializers' job.
    pagination_class: type[BasePagination] | None = None
    filter_backends: Sequence[type[BaseFilterBackend | BaseFilterProtocol[Any]]] = ()
    schema = import_string(REST_FRAMEWORK["DEFAULT_SCHEMA_CLASS"])()

    def get_exception_handler(self) -> Callable[[Exception, dict[str, Any]], Any]:
        return import_string(REST_FRAMEWORK["EXCEPTION_HANDLER"])

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        if request.user.is_authenticated:
            shares = fair_share.request_shares(request)
            fair_share.requests.take(shares)
            self._held_shares = shares
            team = fair_share.caller_keys(request)[0]
            self._turn = team, admission.requests.enter(team)

    @contextmanager
    def waiting(self, shares: list[fair_share.Share]) -> Iterator[None]:
        """While the request waits (a long poll), it holds `shares` (refused at once when
        full) instead of its share of requests in progress: a waiting request takes a thread
        but no processor time, so its team's requests in progress can stay few."""
        with fair_share.waiting_claims.held(shares):
            held, self._held_shares = self._held_shares, None
            if held is not None:
                fair_share.requests.give_back(held)
            turn, self._turn = self._turn, None
            if turn is not None:  # it runs nothing while it waits
                admission.requests.leave(*turn)
            try:
                yield
            finally:
                if turn is not None:
                    self._turn = turn[0], admission.requests.enter(turn[0])
                if held is not None:  # taken back whatever the count: the request goes on
                    fair_share.requests.take(held, force=True)
                    self._held_shares = held

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        try:
            return super().dispatch(request, *args, **kwargs)
        finally:
            self._give_back()

    def _give_back(self) -> None:
        if self._turn is not None:
            admission.requests.leave(*self._turn)
            self._turn = None
        if self._held_shares is not None:
            fair_share.requests.give_back(self._held_shares)
            self._held_shares = None
