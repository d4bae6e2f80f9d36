"""Small HTML helpers for admin columns and read-only fields."""

from __future__ import annotations

import json
from typing import Any

from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from tasks_core.models import Worker
from tasks_core.states import TaskStatus


def worker_lambdas(worker: Worker, names: frozenset[str] | None) -> str:
    """The lambdas a worker serves, as the user may read them: only those in `names` (None:
    all)."""
    if not worker.lambdas:
        return "all registered"
    return ", ".join(name for name in worker.lambdas if names is None or name in names)


#: Badge colours by status: waiting/queued grey-blue, running amber, good green, bad red.
STATUS_COLOURS: dict[str, str] = {
    TaskStatus.NEW: "#5b7083",
    TaskStatus.WAITING: "#8a8f98",
    TaskStatus.ENQUEUED: "#2f6fb0",
    TaskStatus.CLAIMED: "#6a5acd",
    TaskStatus.PROCESSING: "#c77d00",
    TaskStatus.RETRYING: "#d9822b",
    TaskStatus.SUCCESS: "#2e8540",
    TaskStatus.FATAL_FAILURE: "#b0281a",
    TaskStatus.DEAD: "#7a1010",
    TaskStatus.CANCELLED: "#6b6b6b",
    TaskStatus.DROPPED: "#444444",
}


def badge(text: str, colour: str) -> SafeString:
    return format_html(
        '<span style="background:{};color:#fff;border-radius:3px;padding:1px 6px;'
        'white-space:nowrap">{}</span>', colour, text)


def status_badge(status: str) -> SafeString:
    return badge(status, STATUS_COLOURS.get(status, "#555"))


def pretty_json(value: Any) -> SafeString:
    if value is None:
        return format_html("<em>{}</em>", "none")
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
    return format_html('<pre style="margin:0;white-space:pre-wrap">{}</pre>', text)


def error_line(error: dict[str, Any] | None, *, limit: int = 80) -> str:
    """`Type: message`, shortened to `limit` characters; empty without an error."""
    if not error:
        return ""
    text = f"{error.get('type', '')}: {error.get('message', '')}".strip(": ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def traceback_block(error: dict[str, Any] | None) -> SafeString:
    if not error or not error.get("traceback"):
        return format_html("<em>{}</em>", "no traceback")
    return format_html('<pre style="margin:0;white-space:pre-wrap;font-size:11px">{}</pre>',
                       error["traceback"])


def task_links(task_ids: list[tuple[int, str]]) -> SafeString:
    """Links to the change pages of tasks given as (id, status) pairs."""
    if not task_ids:
        return format_html("<em>{}</em>", "none")
    return format_html_join(
        " ", '<a href="{}">#{}</a> {}',
        ((reverse("admin:tasks_core_taskentity_change", args=[pk]), pk, status_badge(status))
         for pk, status in task_ids),
    )


def progress_bar(progress: Any) -> SafeString:
    """A task's last reported progress (a TaskProgress row, or None) as a bar and its note."""
    if progress is None:
        return format_html("<em>{}</em>", "none")
    done = f"{progress.done:g}"
    if progress.total:
        return format_html('<progress value="{}" max="{}"></progress> {}/{:s} {}', done,
                           f"{progress.total:g}", done, f"{progress.total:g}", progress.note)
    return format_html("{} {}", done, progress.note)
