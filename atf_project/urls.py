from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    # The console's dashboard is the admin's front page: its URLs come before the admin's.
    path("admin/", include("tasks_console.urls")),
    path("admin/", admin.site.urls),
]
