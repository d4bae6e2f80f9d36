"""Routes of the REST API (`/api/v1/`), its schema and docs, and the health endpoints."""

from __future__ import annotations

from django.urls import include, path
from rest_framework.routers import SimpleRouter

from tasks_api import docs, health, token_api, views

router = SimpleRouter()
router.register("tasks", views.TaskViewSet, basename="task")
router.register("lambdas", views.LambdaViewSet, basename="lambda")
router.register("dead-letters", views.DeadLetterViewSet, basename="dead-letter")
router.register("tokens", token_api.TokenViewSet, basename="token")

app_name = "tasks_api"

urlpatterns = [
    path("api/v1/", include(router.urls)),
    path("api/v1/stats/", views.StatsView.as_view(), name="stats"),
    path("api/schema/", docs.SchemaView.as_view(), name="schema"),
    path("api/docs/", docs.DocsView.as_view(url_name="tasks_api:schema"), name="docs"),
    path("healthz", health.HealthzView.as_view(), name="healthz"),
    path("readyz", health.ReadyzView.as_view(), name="readyz"),
    path("metrics", health.MetricsView.as_view(), name="metrics"),
]
