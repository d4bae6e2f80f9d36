"""API tokens in the console: a team's tokens listed by prefix, made (shown once) and revoked."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, cast

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import ForeignKey, Model, QuerySet
from django.forms import ModelChoiceField
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.cache import add_never_cache_headers

from tasks_api import tokens
from tasks_api.models import ApiToken
from tasks_console import filters
from tasks_console.base import ConsoleAdmin, report
from tasks_console.forms import ApiTokenForm
from tasks_core import access
from tasks_core.access import Scope
from tasks_core.models import Team

if TYPE_CHECKING:
    from django.contrib.auth.models import User


#: The token a request just made, until its response shows it (gone with the request).
_issued: weakref.WeakKeyDictionary[HttpRequest, str] = weakref.WeakKeyDictionary()


@admin.register(ApiToken)
class ApiTokenAdmin(ConsoleAdmin):
    """A console user may make tokens for their teams, and see and revoke every token that can
    act on them (tokens.acting_on).

    A new token is shown once, on the page that answers the add's POST (never cached), and
    nowhere else: not in a message (the messages framework keeps those in a cookie or the
    session), not in a redirect."""

    form = ApiTokenForm
    team_path = None  # get_queryset scopes the rows
    list_display = ("name", "prefix_shown", "team", "user", "scope", "created_at", "expires_at",
                    "last_used_at", "active")
    list_filter = ("scope", filters.team_filter("team"))
    list_select_related = ("team", "user")
    search_fields = ("name", "prefix")
    fields = ("name", "team", "scope", "expires_at")
    actions = ["revoke"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[ApiToken]:
        return tokens.acting_on(Scope.of(request.user).team_ids)

    @admin.display(description="token")
    def prefix_shown(self, row: ApiToken) -> str:
        return f"{row.prefix}…"

    @admin.display(description="active", boolean=True)
    def active(self, row: ApiToken) -> bool:
        return row.is_active(timezone.now())

    def get_fields(self, request: HttpRequest, obj: Model | None = None) -> Any:
        if obj is None:
            return self.fields
        return ("name", "prefix", "team", "user", "scope", "created_at", "expires_at",
                "revoked_at", "last_used_at")

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return access.may_use_console(request.user)

    def formfield_for_foreignkey(self, db_field: ForeignKey, request: HttpRequest,
                                 **kwargs: Any) -> ModelChoiceField | None:
        if db_field.name == "team":
            kwargs["queryset"] = Scope.of(request.user).filter(Team.objects.all(), "pk")
            kwargs["required"] = True
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def save_model(self, request: HttpRequest, obj: ApiToken, form: Any, change: bool) -> None:
        # Only an add reaches here (tokens cannot be changed); the team came from the
        # scoped choices above, checked again in case the form was forged.
        if obj.team_id is None or not Scope.of(request.user).filter(
                Team.objects.filter(pk=obj.team_id), "pk").exists():
            raise PermissionDenied("You may make tokens only for your teams.")
        # The admin site lets only signed-in staff in.
        obj.user = cast("User", request.user)
        _issued[request] = tokens.save_new(obj)

    def response_add(self, request: HttpRequest, obj: Model,
                     post_url_continue: str | None = None) -> HttpResponse:
        """The page that shows the new token, once: the answer to the POST itself."""
        token = _issued.pop(request)
        response = TemplateResponse(request, "tasks_console/token_created.html", {
            **self.admin_site.each_context(request), "title": "Copy the new token now",
            "opts": self.model._meta, "row": obj, "token": token})
        add_never_cache_headers(response)  # Cache-Control: no-store, among others
        return response

    @admin.action(description="Revoke selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet) -> None:
        now = timezone.now()
        rows = [tokens.revoke(row, now=now) for row in queryset]
        report(request, f"Revoked {len(rows)} token(s): {', '.join(map(str, rows))}.", [])
