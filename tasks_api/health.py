"""/healthz (the process answers), /readyz (database and queue reachable, the database's
session settings sound) and /metrics.

/healthz and /readyz need no credentials, so that load balancers and orchestrators can probe
them; they tell nothing but up or down. /metrics needs a token (Prometheus sends one with
`authorization: {type: Token, credentials: ...}`) unless ATF_METRICS_PUBLIC is on, and shows the
caller's teams' lambdas (all of them to staff and when public).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import datetime, timedelta

from django.db import DatabaseError, connection
from django.db.models import QuerySet
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeHistogramMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from rest_framework.permissions import AllowAny, BasePermission, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from tasks_api import flow_metrics, scopes
from tasks_api.openapi import extend_schema
from tasks_api.policy import ApiPolicy
from tasks_api.renderers import FirstRenderer, JsonErrorsMixin, PrometheusRenderer
from tasks_core import (
    access,
    consumer_liveness,
    incident_stats,
    pooling,
    queue_age,
    queues,
    stats,
)
from tasks_core.conf import atf_settings
from tasks_core.exceptions import QueueUnavailable
from tasks_core.models import Lambda
from tasks_core.states import TaskStatus

logger = logging.getLogger(__name__)


class ProbeView(ApiPolicy, APIView):
    """No authentication (a bad token must not fail a probe) and no throttling."""

    authentication_classes: list = []
    permission_classes = [AllowAny]
    throttle_classes: list = []


class HealthzView(ProbeView):
    @extend_schema(tags=["health"], responses={200: OpenApiTypes.OBJECT})
    def get(self, request: Request) -> Response:
        return Response({"status": "ok"})


def _check_database() -> str:
    """"ok"; "unavailable"; or "misconfigured" when a setting needs the session that a pooler
    in transaction mode does not keep (tasks_core.pooling logs which)."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        problem = pooling.problem()
    except DatabaseError as exc:
        logger.warning("readiness: database unreachable: %s", exc)
        return "unavailable"
    if problem is not None:
        logger.error("readiness: %s", problem)
        return "misconfigured"
    return "ok"


def _check_queue() -> str:
    backend = None
    try:
        backend = queues.backend()
        backend.ping()
        return "ok"
    except QueueUnavailable as exc:
        logger.warning("readiness: queue unreachable: %s", exc)
        return "unavailable"
    finally:
        if backend is not None:
            backend.close()


class ReadyzView(ProbeView):
    @extend_schema(tags=["health"], responses={200: OpenApiTypes.OBJECT, 503: OpenApiTypes.OBJECT})
    def get(self, request: Request) -> Response:
        checks = {"database": _check_database(), "queue": _check_queue()}
        ready = all(value == "ok" for value in checks.values())
        return Response({"status": "ok" if ready else "unavailable", "checks": checks},
                        status=200 if ready else 503)


class StoreCollector(Collector):
    """Reads the task store and the queues when Prometheus scrapes."""

    def __init__(self, lambda_ids: list[int] | None) -> None:
        self.lambda_ids = lambda_ids

    def collect(self) -> Iterator[Metric]:
        now = timezone.now()
        window_s = atf_settings.metrics_window_s
        tasks = GaugeMetricFamily("atf_tasks", "Tasks in the store by lambda and status.",
                                  labels=["lambda", "status"])
        counts = stats.status_counts_by_lambda(lambda_ids=self.lambda_ids)
        # Every lambda and status, zeros included: an alert on a change (dead letters growing)
        # then sees a series start at 0 rather than appear at its first task.
        for name in self._lambdas().values_list("name", flat=True):
            for status in sorted(TaskStatus):
                tasks.add_metric([name, status.value], counts.get(name, {}).get(status, 0))
        yield tasks
        yield from self._queue_depths()
        yield from self._queue_ages(now)
        histogram = stats.latency_histogram(
            since=now - timedelta(seconds=window_s), lambda_ids=self.lambda_ids)
        buckets = [(str(bound), n) for bound, n in zip(histogram.bounds, histogram.buckets,
                                                        strict=True)]
        buckets.append(("+Inf", histogram.count))
        yield GaugeHistogramMetricFamily(
            "atf_delivery_latency_seconds",
            f"started_at - run_at of first attempts started in the last {window_s:g} s.",
            buckets=buckets, gsum_value=histogram.sum_s)
        yield GaugeMetricFamily("atf_workers", "Live worker processes.",
                                value=stats.live_workers(now=now, lambda_ids=self.lambda_ids))
        yield from self._incident_signs(now, window_s)
        yield from flow_metrics.families(self.lambda_ids)

    def _incident_signs(self, now: datetime, window_s: float) -> Iterator[Metric]:
        """What the shipped alert rules watch (tasks_core.incident_stats)."""
        ids = self.lambda_ids
        oldest = GaugeMetricFamily("atf_oldest_due_task_seconds",
                                   "Seconds the oldest due task that has not started has waited.",
                                   labels=["lambda"])
        for name, age_s in sorted(incident_stats.oldest_due_s(now=now, lambda_ids=ids).items()):
            oldest.add_metric([name], age_s)
        yield oldest
        serving = GaugeMetricFamily("atf_lambda_workers", "Live worker processes that serve "
                                    "the lambda.", labels=["lambda"])
        for name, n in incident_stats.workers_by_lambda(now=now, lambda_ids=ids).items():
            serving.add_metric([name], n)
        yield serving
        lost = GaugeMetricFamily("atf_lost_attempts", f"Attempts that lost their worker (no "
                                 f"heartbeat in time) in the last {window_s:g} s.",
                                 labels=["lambda"])
        since = now - timedelta(seconds=window_s)
        for name, n in sorted(incident_stats.lost_attempts(since=since, lambda_ids=ids).items()):
            lost.add_metric([name], n)
        yield lost
        gates = GaugeMetricFamily("atf_lambda_gate", "1 for the lambda's gate state now.",
                                  labels=["lambda", "state"])
        for name, state in incident_stats.gates(now=now, lambda_ids=ids).items():
            gates.add_metric([name, state], 1)
        yield gates
        if (passed_s := consumer_liveness.last_pass_s()) is not None:
            yield GaugeMetricFamily("atf_consumer_pass_age_seconds",
                                    "Seconds since a consumer last finished a pass.",
                                    value=max(now.timestamp() - passed_s, 0.0))

    def _lambdas(self) -> QuerySet[Lambda]:
        lambdas = Lambda.objects.order_by("name")
        if self.lambda_ids is not None:
            lambdas = lambdas.filter(pk__in=self.lambda_ids)
        return lambdas

    def _queue_depths(self) -> Iterator[Metric]:
        lambdas = self._lambdas()
        up = GaugeMetricFamily("atf_queue_up", "1 when the queue service answered.")
        try:
            depths = stats.queue_depths(list(lambdas.values_list("name", flat=True)))
        except QueueUnavailable as exc:
            logger.warning("metrics: queue depths unavailable: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        depth = GaugeMetricFamily("atf_queue_depth", "Messages waiting per lambda and priority.",
                                  labels=["lambda", "priority"])
        for name, by_priority in depths.items():
            for priority, n in by_priority.items():
                depth.add_metric([name, priority], n)
        yield depth

    def _queue_ages(self, now: datetime) -> Iterator[Metric]:
        """Each queue's age (tasks_core.queue_age): from the store, so even with the queue
        service down."""
        age = GaugeMetricFamily("atf_queue_oldest_age_seconds",
                                "Seconds the oldest task waiting in the queue (enqueued, not yet "
                                "claimed) has waited; 0 when none.", labels=["lambda", "priority"])
        ages = queue_age.oldest_waiting_s(now=now, lambda_ids=self.lambda_ids)
        for name, by_priority in ages.items():
            for priority, age_s in by_priority.items():
                age.add_metric([name, priority], age_s)
        yield age


class MetricsPermission(BasePermission):
    def has_permission(self, request: Request, view: APIView) -> bool:
        if scopes.is_worker_token(request):
            return False
        return atf_settings.metrics_public or IsAuthenticated().has_permission(request, view)


class MetricsView(ApiPolicy, JsonErrorsMixin):
    permission_classes = [MetricsPermission]
    renderer_classes = [PrometheusRenderer]
    content_negotiation_class = FirstRenderer

    @extend_schema(tags=["health"], responses={(200, "text/plain"): str})
    def get(self, request: Request) -> Response:
        lambda_ids = None
        if request.user.is_authenticated:
            lambda_ids = access.Scope.of(request.user).lambda_ids()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(StoreCollector(lambda_ids))
        return Response(generate_latest(registry),
                        content_type="text/plain; version=0.0.4; charset=utf-8")
