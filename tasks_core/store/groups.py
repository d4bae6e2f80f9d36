"""A group's bookkeeping: its members' ends counted on its row, and its callbacks released.

Only tasks that are members of a group come here: a finish learns a task's group from the
finish statement itself (the `group_id` it already returns), so a plain task costs no
statement more. Every member's end takes the group row's lock (SELECT ... FOR UPDATE) in the
transaction that records the end, and the group leaves `running` under that lock: of two
members ending at once, the second waits for the first to commit and then reads its count, so
`then` (or `on_failure`) is released exactly once, by whichever end completes the group.
The release itself (store.guarded.release) is a guarded waiting -> new transition as well,
a second fence.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime

from tasks_core.models import TaskGroup
from tasks_core.states import TaskStatus
from tasks_core.store.decisions import UNSUCCESSFUL


def members_ended(ends: Iterable[tuple[int, TaskStatus]], now: datetime) -> list[TaskGroup]:
    """Count members' final statuses, (group id, status) each, on their groups, inside the
    caller's transaction; the groups these ends completed, whose callback is to be released
    (store.guarded.members_ended does both). Groups are locked in id order (after the members'
    rows: the store's lock order)."""
    by_group: defaultdict[int, list[TaskStatus]] = defaultdict(list)
    for group_id, status in ends:
        by_group[group_id].append(status)
    return [group for group_id in sorted(by_group)
            if (group := _count(group_id, by_group[group_id], now)) is not None]


def _count(group_id: int, statuses: list[TaskStatus], now: datetime) -> TaskGroup | None:
    """Count the ends on the group's locked row; the group if they completed it."""
    group = TaskGroup.objects.select_for_update().filter(pk=group_id).first()
    if group is None:  # deleted (retention): nothing waits on it
        return None
    group.succeeded += sum(status is TaskStatus.SUCCESS for status in statuses)
    group.failed += sum(status in UNSUCCESSFUL for status in statuses)
    ended = group.status == TaskGroup.Status.RUNNING and (
        group.failed > 0 or group.succeeded >= group.total)
    if ended:
        group.status = TaskGroup.Status.FAILED if group.failed else TaskGroup.Status.SUCCEEDED
        group.finished_at = now
    TaskGroup.objects.filter(pk=group_id).update(
        succeeded=group.succeeded, failed=group.failed, status=group.status,
        finished_at=group.finished_at)
    return group if ended else None
