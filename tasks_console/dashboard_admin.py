"""The dashboard as an entry of the project's admin: *ATF console › Dashboard* on the admin's
index and sidebar, for the users who may see it, served at the entry's own URL (so a project
need not mount `tasks_console.urls` to have it)."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Model
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse

from tasks_console import views
from tasks_console.models import Dashboard
from tasks_core import access


@admin.register(Dashboard)
class DashboardAdmin(admin.ModelAdmin):
    """No rows to list or change: the entry's page is the dashboard."""

    def get_urls(self) -> list[URLPattern]:
        opts = self.opts
        return [
            path("", self.admin_site.admin_view(self.dashboard_view),
                 name=f"{opts.app_label}_{opts.model_name}_changelist"),
            path("data.json", self.admin_site.admin_view(views.data),
                 name=f"{opts.app_label}_{opts.model_name}_data"),
        ]

    def dashboard_view(self, request: HttpRequest) -> TemplateResponse:
        opts = self.opts
        data_url = reverse(f"{self.admin_site.name}:{opts.app_label}_{opts.model_name}_data")
        return views.page(request, data_url=data_url)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return access.may_use_console(request.user)

    def has_view_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return access.may_use_console(request.user)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False
