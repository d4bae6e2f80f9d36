"""Traces across the queue (tasks_core.tracing): one trace from what scheduled a task to its
attempt, over either transport; a retry linked to it; and, without a tracer provider or without
OpenTelemetry, nothing imported at all."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from tasks_core import atf, lambda_sync, queues, tracing
from tasks_core.models import TaskEntity, TaskTrace
from tasks_core.states import TaskStatus
from tests.conftest import subprocess_env, wait_for
from tests.integration.tasks_api.test_api_support import member, schedule
from tests.integration.workers import test_transports
from tests.integration.workers.test_transports import worker_running
from workers.consumer import Consumer
from workers.transport import DirectTransport, Transport

pytestmark = [pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[3]
#: The transports' fixtures: each worker's way to ATF, direct and remote, and a consumer.
transport = test_transports.transport
consumer = test_transports.consumer
#: The tracer provider of this test process: OpenTelemetry takes one, once.
_EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """Tracing on, as configure() turns it on at start where a provider is set; the spans
    finished, in memory."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    monkeypatch.setattr(tracing, "ENABLED", tracing.ENABLED)  # restored after the test
    assert tracing.configure()
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


def finished(exporter: InMemorySpanExporter, name: str, count: int = 1) -> list[ReadableSpan]:
    """The first `count` finished spans named `name`, awaited."""
    def found() -> list[ReadableSpan]:
        named = [span for span in exporter.get_finished_spans() if span.name == name]
        return named if len(named) >= count else []
    return wait_for(found, message=f"{count} span(s) {name!r}")[:count]  # type: ignore[index]


def test_one_trace_runs_from_the_scheduling_span_to_the_attempt(
        spans: InMemorySpanExporter, transport: Transport, consumer: Consumer) -> None:
    # Given a task scheduled inside a request's span
    with trace.get_tracer("tests").start_as_current_span("POST /orders") as request:
        task = atf.schedule("demo.noop", {"n": 1}, priority="high")
    consumer.run_pass()
    # When a worker over this transport runs it
    with worker_running(transport, ["demo.noop"]):
        wait_for(lambda: TaskEntity.objects.get(pk=task.pk).status == TaskStatus.SUCCESS,
                 message="the task done")
        (attempt,) = finished(spans, "demo.noop")
    # Then the request, the scheduling span and the attempt's span are one trace, each the
    # child of the one before
    (scheduled,) = finished(spans, "schedule demo.noop")
    trace_id = request.get_span_context().trace_id
    assert scheduled.kind == SpanKind.PRODUCER
    assert scheduled.context.trace_id == trace_id
    assert scheduled.parent.span_id == request.get_span_context().span_id
    assert attempt.kind == SpanKind.CONSUMER
    assert attempt.context.trace_id == trace_id
    assert attempt.parent.span_id == scheduled.context.span_id
    # ...and the attempt's span says what ran, by the messaging conventions
    assert dict(attempt.attributes) == {
        "messaging.system": "atf", "messaging.operation.type": "process",
        "messaging.operation.name": "process", "messaging.destination.name": "demo.noop",
        "messaging.message.id": str(task.pk), "atf.task.attempt": 1,
        "atf.task.collection": "default", "atf.task.priority": "high",
        "atf.task.outcome": "success"}
    assert attempt.status.status_code == StatusCode.UNSET


def test_a_retry_starts_a_trace_linked_to_the_scheduling_span(
        spans: InMemorySpanExporter, queue: queues.QueueBackend, consumer: Consumer) -> None:
    # Given a task whose first attempt fails and whose second succeeds
    lambda_sync.sync_to_store()
    task = atf.schedule("demo.fail", {"mode": "retriable", "times": 1})
    (scheduled,) = finished(spans, "schedule demo.fail")
    # When a worker runs both attempts
    with worker_running(DirectTransport(queue), ["demo.fail"]):
        def retried() -> bool:
            consumer.run_pass()  # enqueues the retry once its backoff is over
            return TaskEntity.objects.get(pk=task.pk).status == TaskStatus.SUCCESS

        wait_for(retried, message="the task done on its second attempt")
        first, retry = finished(spans, "demo.fail", count=2)
    # Then the first attempt is the scheduling span's child, with the failure on it
    assert first.parent.span_id == scheduled.context.span_id
    assert first.status.status_code == StatusCode.ERROR
    (error,) = first.events
    assert (error.name, error.attributes["exception.type"]) == ("exception", "RuntimeError")
    # ...and the retry is the root of a trace of its own, linked to the scheduling span
    assert retry.parent is None
    assert retry.context.trace_id != scheduled.context.trace_id
    assert [link.context.span_id for link in retry.links] == [scheduled.context.span_id]
    assert retry.attributes["atf.task.attempt"] == 2


def test_the_apis_scheduling_carries_the_requests_trace(spans: InMemorySpanExporter) -> None:
    # Given a team's client, inside a span (as a server's instrumentation would open one)
    alice = member("alice")
    with trace.get_tracer("tests").start_as_current_span("POST /api/v1/tasks/") as request:
        # When it schedules a task over the API
        response = schedule(alice, payload={})
    assert response.status_code == 201, response.content
    # Then the task carries the context of its scheduling span, in the request's trace
    (scheduled,) = finished(spans, f"schedule {alice.lam.name}")
    row = TaskTrace.objects.get(task_id=response.json()["id"])
    assert row.traceparent.startswith(f"00-{request.get_span_context().trace_id:032x}-"
                                      f"{scheduled.context.span_id:016x}-")


#: A child process that schedules and runs a task with OpenTelemetry made unimportable (or
#: left importable but never configured), and says what it imported.
CHILD = """
import json
import sys
if sys.argv[1] == "blocked":
    sys.modules["opentelemetry"] = None  # import opentelemetry raises ImportError
import django
django.setup()
from tasks_core import atf, tracing
from tasks_core.models import TaskTrace
from workers import executor, http_transport, transport  # noqa: F401 - what workers import
from tasks_api import worker_views  # noqa: F401
from workers.testing import run_due_tasks
task = atf.schedule("demo.noop", {"n": 2})
(outcome,) = run_due_tasks(lambdas=["demo.noop"])
assert outcome.status == "success", outcome
assert not tracing.ENABLED and not TaskTrace.objects.filter(task_id=task.pk).exists()
loaded = sorted(name for name in sys.modules if name.startswith("opentelemetry")
                and sys.modules[name] is not None)
print(json.dumps(loaded))
"""


@pytest.mark.parametrize("opentelemetry", ["blocked", "unconfigured"])
def test_without_a_tracer_provider_nothing_of_opentelemetry_is_imported(
        opentelemetry: str) -> None:
    lambda_sync.sync_to_store()
    # When a process without OpenTelemetry, or with it but no tracer provider, schedules and
    # runs a task
    run = subprocess.run([sys.executable, "-c", CHILD, opentelemetry], cwd=ROOT,
                         env=subprocess_env(DJANGO_SETTINGS_MODULE="tests.settings"),
                         capture_output=True, text=True, timeout=60)
    # Then the task ran untraced
    assert run.returncode == 0, run.stdout + run.stderr
    loaded = json.loads(run.stdout.splitlines()[-1])
    if opentelemetry == "blocked":
        # ...and no module of OpenTelemetry was imported
        assert loaded == []
    else:
        # ...and ATF imported none (redis-py's observability imports OpenTelemetry's API and
        # metrics SDK of itself wherever they are installed; never its propagators)
        assert "opentelemetry.trace.propagation.tracecontext" not in loaded, loaded
        assert "opentelemetry.sdk.trace" not in loaded, loaded
