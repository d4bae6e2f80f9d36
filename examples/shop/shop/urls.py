"""The shop's URLs: its own order view and admin, with ATF's API and console beside them."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from orders import views

urlpatterns = [
    path("orders/", views.place_order, name="place-order"),
    # ATF's dashboard, before the admin's own URLs; ATF's models are in this admin.
    path("admin/atf/", include("tasks_console.urls")),
    path("admin/", admin.site.urls),
    path("atf/api/", include("tasks_api.urls")),
    path("atf/", include("tasks_api.health_urls")),
]
