"""The host project's URLs: its own API view and admin, with ATF's mounted under atf/."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from tests.host_project import views

urlpatterns = [
    path("api/ping/", views.PingView.as_view()),
    path("admin/", admin.site.urls),
    path("atf/api/", include("tasks_api.urls")),
    path("atf/", include("tasks_api.health_urls")),
]
