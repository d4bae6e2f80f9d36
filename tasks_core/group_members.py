"""Inserting a group's members: its chains' earlier steps, the tasks their idempotency keys
name, and the rest, in the group's order.

A chain member's steps before its last are inserted first, one statement per step depth (and
per ATF_MAX_BATCH_SIZE), each step waiting for the one before it; its last step is the
member. A step that ends fatal_failure, dead, cancelled or dropped cancels the steps after it
(store.guarded.wake_children), its last one with them, and that end fails the group.

A member with an idempotency key that names an existing task of its lambda becomes that task
(no second one is made): the task joins the group with its place in it, and if it has already
ended, its end counts at once. A task belongs to one group only: a key that names a task of
another group refuses the whole group (a group's callbacks take no key). The join is a guarded
UPDATE (`group_id IS NULL`), so of two groups naming one task at once, one gets it; a finish
racing it waits for the row and reads the group it joined (store.groups).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Case, Value, When

from tasks_core import scheduling, states, store
from tasks_core.conf import atf_settings
from tasks_core.exceptions import InvalidTask
from tasks_core.models import TaskEntity, TaskGroup
from tasks_core.states import TaskStatus

#: A final member's end, to count on its group: (group id, status).
End = tuple[int, TaskStatus]


@dataclass(frozen=True, slots=True)
class Member:
    """A validated member: its task, and for a chain member the steps before it, in order."""

    task: store.NewTask
    before: tuple[store.NewTask, ...] = ()


def insert(group: TaskGroup, members: Sequence[Member],
           now: datetime) -> tuple[list[TaskEntity], list[End]]:
    """Insert a group's members, inside the caller's transaction: the tasks made, and the ends
    of the members that are already final (a key's task that ended, a member whose parent had
    failed), to count on the group. InvalidTask, keyed "tasks[i].idempotency_key", for a key
    that names another group's task."""
    made, last_before = _chain_steps(members, now)
    tasks = [dataclasses.replace(member.task, group_id=group.pk, group_position=index + 1,
                                 parents=(last_before[index],) if member.before
                                 else member.task.parents)
             for index, member in enumerate(members)]
    joined = _join(group, [(position, task) for position, task in enumerate(tasks, 1)
                           if task.idempotency_key is not None])
    fresh = _create([task for position, task in enumerate(tasks, 1) if position not in joined],
                    now)
    ends = [(group.pk, status) for status in joined.values() if status in states.FINAL]
    ends += [(group.pk, TaskStatus(entity.status)) for entity in fresh
             if entity.status in states.FINAL]
    return made + fresh, ends


def _create(tasks: Sequence[store.NewTask], now: datetime) -> list[TaskEntity]:
    """Insert tasks, a statement per ATF_MAX_BATCH_SIZE of them."""
    step = atf_settings.max_batch_size
    return [entity for start in range(0, len(tasks), step)
            for entity in scheduling.create(tasks[start:start + step], now)]


def _chain_steps(members: Sequence[Member],
                 now: datetime) -> tuple[list[TaskEntity], dict[int, int]]:
    """Insert the chain members' steps before their last, depth by depth: the tasks, and by
    member index the id of its step before the last."""
    chains = [(index, member.before) for index, member in enumerate(members) if member.before]
    made: list[TaskEntity] = []
    previous: dict[int, int] = {}
    depth = 0
    while level := [(index, before[depth]) for index, before in chains if depth < len(before)]:
        entities = _create([dataclasses.replace(step, parents=(previous[index],)) if depth
                            else step for index, step in level], now)
        previous.update((index, entity.pk) for (index, _step), entity
                        in zip(level, entities, strict=True))
        made += entities
        depth += 1
    return made, previous


def _join(group: TaskGroup,
          keyed: Sequence[tuple[int, store.NewTask]]) -> dict[int, TaskStatus]:
    """Make the existing tasks that members' keys name, (position, task) each, members of
    `group`: by position, the status of each that joined."""
    existing = _by_key([task for _position, task in keyed])
    positions = {pk: position for position, task in keyed
                 if (pk := existing.get((task.lambda_id, task.idempotency_key)))}
    if not positions:
        return {}
    step = atf_settings.max_batch_size
    ids = list(positions)
    for start in range(0, len(ids), step):
        batch = ids[start:start + step]
        TaskEntity.objects.filter(pk__in=batch, group__isnull=True).update(
            group_id=group.pk, group_position=Case(
                *[When(pk=pk, then=Value(positions[pk])) for pk in batch]))
    rows = TaskEntity.objects.filter(pk__in=ids).values_list("pk", "group_id", "status")
    if errors := {f"tasks[{positions[pk] - 1}].idempotency_key": [
            f"Names task {pk}, already a member of group {group_id}: a task belongs to one "
            f"group only."] for pk, group_id, _status in rows if group_id != group.pk}:
        raise InvalidTask(errors)
    return {positions[pk]: TaskStatus(status) for pk, _group_id, status in rows}


def _by_key(keyed: Sequence[store.NewTask]) -> dict[tuple[int, str | None], int]:
    """The ids of the existing tasks these keys name, by (lambda id, key): a statement per
    lambda."""
    keys: defaultdict[int, list[str | None]] = defaultdict(list)
    for task in keyed:
        keys[task.lambda_id].append(task.idempotency_key)
    return {(lambda_id, key): pk for lambda_id, named in keys.items()
            for pk, key in TaskEntity.objects.filter(lambda_ref_id=lambda_id,
                                                     idempotency_key__in=named)
            .values_list("pk", "idempotency_key")}
