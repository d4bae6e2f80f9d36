"""API tokens in the console: a team's tokens listed by prefix, made (shown once) and revoked."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Field, ForeignKey, Model, QuerySet
from django.forms import Field as FormField
from django.forms import ModelChoiceField
from django.http import HttpRequest
from django.utils import timezone

from tasks_api import tokens
from tasks_api.models import ApiToken
from tasks_console import filters
from tasks_console.base import ConsoleAdmin, report
from tasks_console.forms import within_time_bounds
from tasks_core import access
from tasks_core.access import Scope
from tasks_core.models import Team

if TYPE_CHECKING:
    from django.contrib.auth.models import User


@admin.register(ApiToken)
class ApiTokenAdmin(ConsoleAdmin):
    """A console user may make tokens for their teams, and see and revoke every token that can
    act on them (tokens.acting_on)."""

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

    def formfield_for_dbfield(self, db_field: Field, request: HttpRequest,
                              **kwargs: Any) -> FormField | None:
        field = super().formfield_for_dbfield(db_field, request, **kwargs)
        if db_field.name == "expires_at" and field is not None:
            field.validators.append(within_time_bounds)
        return field

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
        token = tokens.save_new(obj)
        messages.warning(request, f"Token {obj.name!r}: {token} — copy it now, it is not "
                                  "shown again.")

    @admin.action(description="Revoke selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet) -> None:
        now = timezone.now()
        rows = [tokens.revoke(row, now=now) for row in queryset]
        report(request, f"Revoked {len(rows)} token(s): {', '.join(map(str, rows))}.", [])
