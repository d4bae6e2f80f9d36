"""Traces across the queue with OpenTelemetry (the `otel` extra), after OpenTelemetry's
messaging semantic conventions.

Scheduling a task makes a PRODUCER span "schedule <lambda>", a child of the current span, and
the task carries that span's W3C trace context (a TaskTrace row: traceparent, tracestate).
Each attempt runs in a CONSUMER span named for its lambda: the first attempt a child of the
scheduling span (one trace from the request that scheduled it), a retry the root of a trace of
its own, linked to the scheduling span.

Tracing is decided once, when the apps load (`configure`): it is on only where OpenTelemetry is
already imported and a tracer provider is set. Off, nothing here imports OpenTelemetry, and the
callers skip tracing on one check of `ENABLED` (the executor on its construction): no call and
no query per task.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from tasks_core import directory, shards
from tasks_core.models import TaskEntity, TaskTrace

if TYPE_CHECKING:
    from tasks_core import store
    from tasks_core.context import TaskContext

    RunLambda = Callable[[store.ClaimedTask, TaskContext], store.Result]

#: Whether this process traces tasks; set once by `configure` when the apps load.
ENABLED = False
#: `messaging.system` of every span.
SYSTEM = "atf"
#: The instrumentation scope's name.
TRACER_NAME = "django-atf"


def configure() -> bool:
    """Turn tracing on where OpenTelemetry is imported and a tracer provider set (not the
    default proxy, nor the no-op one); say whether it is on."""
    global ENABLED
    ENABLED = _provider_set()
    return ENABLED


def _provider_set() -> bool:
    if "opentelemetry.trace" not in sys.modules:
        return False  # nothing set one, and nothing is imported to find out
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def record_scheduled(entities: Sequence[TaskEntity]) -> None:
    """A PRODUCER span per newly scheduled task, and the task's TaskTrace row with its
    context (in the caller's transaction). Only where ENABLED."""
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    tracer = trace.get_tracer(TRACER_NAME)
    w3c = TraceContextTextMapPropagator()
    rows = []
    for entity in entities:
        name = directory.by_id(entity.lambda_ref_id).name
        carrier: dict[str, str] = {}
        with tracer.start_as_current_span(
                f"schedule {name}", kind=trace.SpanKind.PRODUCER, attributes={
                    "messaging.system": SYSTEM, "messaging.operation.type": "send",
                    "messaging.operation.name": "schedule",
                    "messaging.destination.name": name,
                    "messaging.message.id": str(entity.pk)}):
            w3c.inject(carrier)
        if "traceparent" in carrier:
            rows.append(TaskTrace(task_id=entity.pk, traceparent=carrier["traceparent"],
                                  tracestate=carrier.get("tracestate", "")))
    TaskTrace.objects.bulk_create(rows)


def with_context(claimed: list[store.ClaimedTask]) -> list[store.ClaimedTask]:
    """The claimed tasks with the trace context they were scheduled in, where they have one
    (one query). Imports no OpenTelemetry: the worker API answers it to a remote worker that
    traces."""
    if not claimed:
        return claimed
    found = {pk: {"traceparent": parent, **({"tracestate": state} if state else {})}
             for part in shards.each(task.task_id for task in claimed)
             for pk, parent, state in TaskTrace.objects.filter(task_id__in=part).values_list(
                 "task_id", "traceparent", "tracestate")}
    return [dataclasses.replace(task, trace=found[task.task_id]) if task.task_id in found
            else task for task in claimed]


def traced(run: Callable[..., store.Result]) -> Callable[..., store.Result]:
    """`run` (workers.executor.run_lambda) inside a CONSUMER span per attempt. Only where
    ENABLED: the executor takes this once, never per task."""
    from opentelemetry import context, trace
    from opentelemetry.trace import Link, SpanKind, Status, StatusCode
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    from tasks_core.store import Outcome

    tracer = trace.get_tracer(TRACER_NAME)
    w3c = TraceContextTextMapPropagator()

    def run_in_span(task: store.ClaimedTask, ctx: TaskContext, *, worker: str,
                    **options: Any) -> store.Result:
        scheduled = w3c.extract(task.trace) if task.trace else None
        first = task.attempt == 1
        links = []
        if scheduled is not None and not first:
            links.append(Link(trace.get_current_span(scheduled).get_span_context()))
        # An empty context, not the thread's: an attempt's span never nests in another's.
        parent = scheduled if scheduled is not None and first else context.Context()
        with tracer.start_as_current_span(
                task.lambda_name, context=parent, kind=SpanKind.CONSUMER, links=links,
                attributes={
                    "messaging.system": SYSTEM, "messaging.operation.type": "process",
                    "messaging.operation.name": "process",
                    "messaging.destination.name": task.lambda_name,
                    "messaging.message.id": str(task.task_id),
                    "atf.task.attempt": task.attempt, "atf.task.collection": task.collection,
                    "atf.task.priority": task.priority}) as span:
            result = run(task, ctx, worker=worker, **options)
            span.set_attribute("atf.task.outcome", str(result.outcome))
            if result.error is not None:
                span.add_event("exception", {
                    "exception.type": result.error.get("type", ""),
                    "exception.message": result.error.get("message", ""),
                    "exception.stacktrace": result.error.get("traceback", "")})
            if result.outcome != Outcome.SUCCESS:
                span.set_status(Status(StatusCode.ERROR, str(result.outcome)))
            return result

    return run_in_span
