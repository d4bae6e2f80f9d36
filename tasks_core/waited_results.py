"""The results a task waited for, in order: a group's members' for its `then` or `on_failure`,
else its `after` parents' (what `ctx.parent_results()` returns). Reads only, a page at a time,
so the worker API can serve them to remote workers in pages too."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from django.db.models import Q, QuerySet

from tasks_core.models import TaskDependency, TaskEntity, TaskGroup

#: Results one page of `parent_results` reads.
RESULTS_PAGE = 1000


def waited_for(task_id: int) -> QuerySet[TaskEntity]:
    """The tasks `task_id` waited for: a group's members for its `then` or `on_failure`,
    else its `after` parents."""
    group_id = TaskGroup.objects.filter(Q(then_id=task_id) | Q(on_failure_id=task_id)) \
        .values_list("pk", flat=True).first()
    if group_id is not None:
        return TaskEntity.objects.filter(group_id=group_id)
    return TaskEntity.objects.filter(pk__in=TaskDependency.objects.filter(
        child_id=task_id).values("parent_id"))


def parent_results(task_id: int, *, after_id: int = 0) -> list[tuple[int, Any]]:
    """(task id, result) of the tasks `task_id` waited for (`waited_for`), in order: the
    first RESULTS_PAGE of those with an id over `after_id`."""
    return list(waited_for(task_id).filter(pk__gt=after_id).order_by("pk")
                .values_list("pk", "result")[:RESULTS_PAGE])


def all_results(read_page: Callable[[int], Sequence[tuple[int, Any]]]) -> list[Any]:
    """Every result of `read_page(after_id)`, page after page until one comes back short."""
    results: list[Any] = []
    after = 0
    while True:
        page = read_page(after)
        results.extend(result for _pk, result in page)
        if len(page) < RESULTS_PAGE:
            return results
        after = page[-1][0]


def local_parent_results(task_id: int) -> list[Any]:
    """Every result `parent_results` pages through, read from the store itself (a direct
    worker, the test helpers)."""
    return all_results(lambda after: parent_results(task_id, after_id=after))
