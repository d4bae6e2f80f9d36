"""Routes of the REST API (`v1/`), its schema and docs. A project mounts them where it likes:
the standalone service at `api/` (so `/api/v1/tasks/`), a host project e.g. at `atf/api/`."""

from __future__ import annotations

from django.urls import include, path
from rest_framework.routers import SimpleRouter

from tasks_api import docs, token_api, views

router = SimpleRouter()
router.register("tasks", views.TaskViewSet, basename="task")
router.register("lambdas", views.LambdaViewSet, basename="lambda")
router.register("dead-letters", views.DeadLetterViewSet, basename="dead-letter")
router.register("tokens", token_api.TokenViewSet, basename="token")
router.register("periodic-tasks", views.PeriodicTaskViewSet, basename="periodic-task")

app_name = "tasks_api"

urlpatterns = [
    path("v1/", include(router.urls)),
    path("v1/stats/", views.StatsView.as_view(), name="stats"),
    path("schema/", docs.SchemaView.as_view(), name="schema"),
    path("docs/", docs.DocsView.as_view(url_name="tasks_api:schema"), name="docs"),
]
