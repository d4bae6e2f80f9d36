"""Routes of the probes and metrics: `healthz`, `readyz` and `metrics`, mounted where the
project likes (the standalone service at the root, so `/healthz`)."""

from __future__ import annotations

from django.urls import path

from tasks_api import health

app_name = "atf_health"

urlpatterns = [
    path("healthz", health.HealthzView.as_view(), name="healthz"),
    path("readyz", health.ReadyzView.as_view(), name="readyz"),
    path("metrics", health.MetricsView.as_view(), name="metrics"),
]
