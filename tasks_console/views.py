"""The dashboard: the console's front page, and the JSON its page polls to redraw itself.

The admin serves both at its *ATF console › Dashboard* entry (tasks_console.dashboard_admin);
`tasks_console.urls` serves them wherever a project mounts it (the standalone service: as the
admin's front page).
"""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.views.decorators import staff_member_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, JsonResponse
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.cache import never_cache

from tasks_console import dashboard
from tasks_core import access

#: Seconds between two redraws of an open dashboard.
REFRESH_S = 5


def _content(request: HttpRequest) -> dict:
    if not access.may_use_console(request.user):
        raise PermissionDenied("Ask an administrator to add you to a team.")
    return dashboard.build(request.user, timezone.now())


def page(request: HttpRequest, *, data_url: str) -> TemplateResponse:
    """The dashboard page, redrawn from `data_url`, with the admin's list of models under it."""
    context = {
        **admin.site.each_context(request),
        **_content(request),
        "title": "Dashboard",
        "refresh_s": REFRESH_S,
        "data_url": data_url,
        "app_list": admin.site.get_app_list(request),
    }
    return TemplateResponse(request, "tasks_console/dashboard.html", context)


@never_cache
@staff_member_required
def index(request: HttpRequest) -> TemplateResponse:
    """The dashboard at `tasks_console.urls`."""
    return page(request, data_url=reverse("tasks_console:dashboard-data"))


@never_cache
@staff_member_required
def data(request: HttpRequest) -> JsonResponse:
    """The dashboard's panels as HTML fragments, keyed by the id of the element they fill."""
    content = _content(request)
    panels = render_to_string("tasks_console/dashboard_panels.html", content, request)
    return JsonResponse({"panels": panels, "updated": content["now"].isoformat()})
