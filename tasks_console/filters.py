"""List filters whose choices come from small tables, never from a scan of the task table."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from tasks_core import liveness, operations, shards
from tasks_core.access import Scope
from tasks_core.conf import atf_settings
from tasks_core.models import Collection, Team

#: Rows of the dead-letter queue that the error-type choices are taken from.
SAMPLE = 1000


class _ChoiceFilter(admin.SimpleListFilter):
    """A filter on one field. The admin applies only filters with choices, so the value in
    use is always one of them."""

    field = ""
    #: Whether only the listed choices are valid values (ids of the user's lambdas or teams).
    closed = False

    def with_current(self, choices: list[tuple[str, str]]) -> list[tuple[str, str]]:
        value = self.value()
        if value and value not in {key for key, _label in choices}:
            choices.append((value, value if len(value) <= 40 else value[:39] + "…"))
        return choices

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() in (None, ""):
            return queryset
        if self.closed and self.value() not in {key for key, _label in self.lookup_choices}:
            raise IncorrectLookupParameters(f"{self.parameter_name}: not one of the choices")
        return queryset.filter(**{self.field: self.value()})


class LambdaFilter(_ChoiceFilter):
    title = "lambda"
    parameter_name = "lambda"
    field = "lambda_ref__id"
    closed = True

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        lambdas = Scope.of(request.user).lambdas().values_list("pk", "name")
        return [(str(pk), name) for pk, name in lambdas]


class CollectionFilter(_ChoiceFilter):
    title = "collection"
    parameter_name = "collection"
    field = "collection"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        rows = Scope.of(request.user).filter(Collection.objects.all(), "lambda_ref__team")
        names = sorted(set(rows.values_list("name", flat=True)))
        return self.with_current([(name, name) for name in names])


class PriorityFilter(_ChoiceFilter):
    title = "priority"
    parameter_name = "priority"
    field = "priority"
    closed = True

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(name, name) for name in atf_settings.priorities]


class TeamFilter(_ChoiceFilter):
    """The user's teams only (Django's own filter on a team field would list every team)."""

    title = "team"
    parameter_name = "team"
    field = "lambda_ref__team__id"
    closed = True

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        teams = Scope.of(request.user).filter(Team.objects.all(), "pk").values_list("pk", "name")
        return [(str(pk), name) for pk, name in teams]


class ShardFilter(admin.SimpleListFilter):
    """The tasks of one shard of the store: offered only where there are several (a list
    without a choice is slot 0's shard)."""

    title = "shard"
    parameter_name = "shard"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(alias, alias) for alias in shards.aliases()] if shards.sharded() else []

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() in (None, ""):
            return queryset
        if self.value() not in shards.aliases():
            raise IncorrectLookupParameters("shard: not one of the choices")
        return queryset.using(str(self.value()))


def team_filter(team_path: str) -> type[TeamFilter]:
    """A TeamFilter for rows whose team is reached by `team_path`."""
    return type(f"TeamFilter[{team_path}]", (TeamFilter,), {"field": f"{team_path}__id"})


class WorkerFilter(_ChoiceFilter):
    """The tasks a worker process runs or ran; the choices are the live workers of the user's
    lambdas (a stopped worker's id can still be given in the URL)."""

    title = "worker"
    parameter_name = "worker"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        live = liveness.live_workers(now=timezone.now()).order_by("worker_id")
        workers = Scope.of(request.user).workers(live)
        return self.with_current([(w.worker_id, w.worker_id) for w in workers])

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() in (None, ""):
            return queryset
        return queryset.filter(operations.worked_by(str(self.value())))


class ErrorTypeFilter(_ChoiceFilter):
    """The error types among the latest dead letters."""

    title = "error type"
    parameter_name = "error_type"
    field = "last_error__type"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        dead = model_admin.get_queryset(request)
        latest = list(dead.order_by("-id").values_list("pk", flat=True)[:SAMPLE])
        types = (dead.filter(pk__in=latest).order_by()
                 .values_list("last_error__type", flat=True).distinct()[:50])
        return self.with_current([(name, name) for name in sorted(t for t in types if t)])


class ErrorMessageFilter(_ChoiceFilter):
    """Behind the dead-letter summary's links: errors whose message starts with a text."""

    title = "error message starts with"
    parameter_name = "error_message"
    field = "last_error__message__startswith"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return self.with_current([])
