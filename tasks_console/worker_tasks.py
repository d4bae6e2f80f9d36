"""A worker's console page: the tasks it runs now and how long each has run."""

from __future__ import annotations

from datetime import datetime
from urllib.parse import urlencode

from django.db.models import QuerySet
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from tasks_core.models import Lambda, TaskEntity, Worker
from tasks_core.states import TaskStatus

#: Most running tasks listed (a worker runs at most its threads × processes at once).
MOST = 200


def _elapsed(since: datetime | None, now: datetime) -> str:
    if since is None:
        return "-"
    seconds = max(int((now - since).total_seconds()), 0)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h {rest // 60:02d}m {rest % 60:02d}s" if hours else \
        f"{rest // 60}m {rest % 60:02d}s"


def running_table(worker: Worker, lambdas: QuerySet[Lambda], *, now: datetime) -> SafeString:
    """The worker's claimed and running tasks of `lambdas`, longest running first, as a table,
    and a link to every task it runs or ran."""
    tasks = (TaskEntity.objects.filter(worker=worker.worker_id, lambda_ref__in=lambdas,
                                       status__in=[TaskStatus.CLAIMED, TaskStatus.PROCESSING])
             .order_by("started_at", "claimed_at")
             .values_list("pk", "lambda_ref__name", "status", "claimed_at", "started_at")[:MOST])
    every = reverse("admin:tasks_core_taskentity_changelist") + "?" + urlencode(
        {"worker": worker.worker_id})
    link = format_html('<p><a href="{}">Every task of this worker</a></p>', every)
    if not tasks:
        return format_html("<p>None right now.</p>{}", link)
    rows = format_html_join(
        "", '<tr><td><a href="{}">{}</a></td><td>{}</td><td>{}</td><td>{}</td></tr>',
        ((reverse("admin:tasks_core_taskentity_change", args=[pk]), pk, name, status,
          _elapsed(started or claimed, now))
         for pk, name, status, claimed, started in tasks))
    return format_html('<table><thead><tr><th>task</th><th>lambda</th><th>status</th>'
                       '<th>running for</th></tr></thead><tbody>{}</tbody></table>{}',
                       rows, link)
