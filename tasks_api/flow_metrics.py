"""Flow control in /metrics: each lambda's limits, the tasks they hold back now, and the starts
they refused (tasks_core.flow, tasks_core.flow_metrics)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from tasks_core import directory, flow, flow_metrics
from tasks_core.models import Lambda

#: Each limit's option column, by the name the metrics' `limit` label gives it.
_COLUMNS = {flow.CONCURRENCY: "concurrency", flow.RATE: "rate_per_s",
            flow.KEY_CONCURRENCY: "key_concurrency", flow.KEY_RATE: "key_rate_per_s"}


def families(lambda_ids: list[int] | None) -> Iterator[Metric]:
    """atf_flow_limit, atf_flow_held and atf_flow_refused_total for the lambdas in scope."""
    rows = Lambda.objects.order_by("name")
    if lambda_ids is not None:
        rows = rows.filter(pk__in=lambda_ids)
    names = dict(rows.values_list("pk", "name"))
    limit = GaugeMetricFamily("atf_flow_limit", "A flow limit in effect: tasks running at once "
                              "(concurrency), or starts a second (rate).",
                              labels=["lambda", "limit"])
    for lambda_id, name in names.items():
        lim = flow.of(lambda_id)
        if lim is None:
            continue
        info = directory.by_id(lambda_id)
        for label, column in _COLUMNS.items():
            if (value := getattr(info, column)) is not None:
                limit.add_metric([name, label], float(value))
    yield limit
    held = GaugeMetricFamily("atf_flow_held", "Tasks a flow limit holds back now.",
                             labels=["lambda"])
    for lambda_id, count in sorted(flow.held_counts(list(names)).items()):
        held.add_metric([names[lambda_id]], count)
    yield held
    refused = CounterMetricFamily("atf_flow_refused", "Starts a flow limit refused (the task "
                                  "was held back).", labels=["lambda", "limit"])
    for (lambda_id, label), count in sorted(flow_metrics.refused().items()):
        if lambda_id in names:
            refused.add_metric([names[lambda_id], label], count)
    yield refused
