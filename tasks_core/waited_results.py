"""The results a task waited for, in order: a group's members' for its `then` or `on_failure`,
else its `after` parents' (what `ctx.parent_results()` returns). Reads only, a page at a time,
so the worker API can serve them to remote workers in pages too."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from django.db.models import Q

from tasks_core.models import TaskDependency, TaskEntity, TaskGroup

#: Results one page of `parent_results` reads.
RESULTS_PAGE = 1000


def parent_results(task_id: int, *, after_id: int = 0) -> list[tuple[int, Any]]:
    """(place, result) of the tasks `task_id` waited for, in order, the first RESULTS_PAGE of
    those placed after `after_id`: its group's members by their position in the group when it
    is a group's `then` or `on_failure` (a chain member's by its last step, the member), else
    its `after` parents by id."""
    group_id = TaskGroup.objects.filter(Q(then_id=task_id) | Q(on_failure_id=task_id)) \
        .values_list("pk", flat=True).first()
    if group_id is not None:
        members = TaskEntity.objects.filter(group_id=group_id, group_position__gt=after_id)
        return [(position or 0, result) for position, result in members
                .order_by("group_position").values_list("group_position", "result")[:RESULTS_PAGE]]
    parents = TaskEntity.objects.filter(pk__gt=after_id, pk__in=TaskDependency.objects.filter(
        child_id=task_id).values("parent_id"))
    return list(parents.order_by("pk").values_list("pk", "result")[:RESULTS_PAGE])


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
