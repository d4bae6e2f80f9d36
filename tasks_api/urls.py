"""Routes of the REST API (`v1/`), its schema and docs. A project mounts them where it likes:
the standalone service at `api/` (so `/api/v1/tasks/`), a host project e.g. at `atf/api/`."""

from __future__ import annotations

from django.urls import include, path
from rest_framework.routers import SimpleRouter

from tasks_api import docs, group_views, token_api, views, worker_views

router = SimpleRouter()
router.register("tasks", views.TaskViewSet, basename="task")
router.register("lambdas", views.LambdaViewSet, basename="lambda")
router.register("dead-letters", views.DeadLetterViewSet, basename="dead-letter")
router.register("tokens", token_api.TokenViewSet, basename="token")
router.register("groups", group_views.GroupViewSet, basename="group")
router.register("periodic-tasks", views.PeriodicTaskViewSet, basename="periodic-task")

app_name = "tasks_api"

urlpatterns = [
    path("v1/", include(router.urls)),
    path("v1/stats/", views.StatsView.as_view(), name="stats"),
    path("v1/worker/lambdas/", worker_views.LambdasView.as_view(), name="worker-lambdas"),
    path("v1/worker/register/", worker_views.RegisterView.as_view(), name="worker-register"),
    path("v1/worker/claim/", worker_views.ClaimView.as_view(), name="worker-claim"),
    path("v1/worker/start/", worker_views.StartView.as_view(), name="worker-start"),
    path("v1/worker/heartbeat/", worker_views.HeartbeatView.as_view(), name="worker-heartbeat"),
    path("v1/worker/finish/", worker_views.FinishView.as_view(), name="worker-finish"),
    path("v1/worker/release/", worker_views.ReleaseView.as_view(), name="worker-release"),
    path("v1/worker/stopped/", worker_views.StoppedView.as_view(), name="worker-stopped"),
    path("v1/worker/steps/", worker_views.StepsView.as_view(), name="worker-steps"),
    path("v1/worker/step/", worker_views.StepView.as_view(), name="worker-step"),
    path("v1/worker/progress/", worker_views.ProgressView.as_view(), name="worker-progress"),
    path("v1/worker/parent-results/", worker_views.ParentResultsView.as_view(),
         name="worker-parent-results"),
    path("schema/", docs.SchemaView.as_view(), name="schema"),
    path("docs/", docs.DocsView.as_view(url_name="tasks_api:schema"), name="docs"),
]
