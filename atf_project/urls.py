from django.contrib import admin
from django.urls import include, path

from tasks_console.login import ThrottledLoginForm

# The standalone service's admin is the ATF console (its branding: templates/admin/); a host
# project keeps its own admin's titles.
admin.site.index_title = "Dashboard"
admin.site.site_url = None  # the service has no public site: no "View site" link
# Failed logins lock out a user name and address for a while (a host project may do the same).
admin.site.login_form = ThrottledLoginForm

urlpatterns = [
    # The console's dashboard is the admin's front page: its URLs come before the admin's.
    path("admin/", include("tasks_console.urls")),
    path("admin/", admin.site.urls),
    path("api/", include("tasks_api.urls")),
    path("", include("tasks_api.health_urls")),
]

# Error pages are JSON under /api/ and the health endpoints, Django's own elsewhere.
handler400 = "tasks_api.exceptions.bad_request"
handler403 = "tasks_api.exceptions.permission_denied"
handler404 = "tasks_api.exceptions.page_not_found"
handler500 = "tasks_api.exceptions.server_error"
