"""Mounted at /admin/ before the admin's own URLs, so the admin's front page is the dashboard."""

from __future__ import annotations

from django.urls import path

from tasks_console import views

app_name = "tasks_console"

urlpatterns = [
    path("", views.index, name="dashboard"),
    path("dashboard.json", views.data, name="dashboard-data"),
]
