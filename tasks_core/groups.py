"""Groups with callbacks (fan-out / fan-in): `atf.group([...], then=..., on_failure=...)`.

A group's members are scheduled together, in one transaction and one insert statement per
ATF_MAX_BATCH_SIZE of them, each carrying the group's id; its callbacks are inserted `waiting`
and only the group's end releases one of them (tasks_core.store.groups): `then` once every
member succeeded, `on_failure` once one ended fatal_failure, dead, cancelled or dropped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection as Many
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Count
from django.utils import timezone

from tasks_core import directory, scheduling, shards, store
from tasks_core.conf import atf_settings
from tasks_core.exceptions import InvalidTask
from tasks_core.models import TaskEntity, TaskGroup
from tasks_core.scheduling import TaskRequest
from tasks_core.states import TaskStatus
from tasks_core.store import guarded
from tasks_core.store.decisions import UNSUCCESSFUL

#: Members one group may have.
MAX_MEMBERS = 100_000


@dataclass(frozen=True, slots=True)
class GroupRequest:
    """A group to schedule: its members, and the callbacks of its end. A step of `atf.chain`
    as well: the step before it is every member's parent, and the step after it waits for
    `then` (or, with no `then`, is the `then`)."""

    tasks: Sequence[TaskRequest | Mapping[str, Any]]
    then: TaskRequest | Mapping[str, Any] | None = None
    on_failure: TaskRequest | Mapping[str, Any] | None = None


def _request(item: TaskRequest | Mapping[str, Any], now: datetime,
             teams: Many[int] | None) -> TaskRequest:
    return item if isinstance(item, TaskRequest) else TaskRequest.from_json(item, now=now,
                                                                            teams=teams)


def _validate_all(request: GroupRequest, now: datetime, teams: Many[int] | None,
                  after: tuple[int, ...]) -> tuple[list[store.NewTask], dict[str, store.NewTask]]:
    """The members and callbacks to insert; InvalidTask with every error, keyed
    "tasks[i].field", "then.field", "on_failure.field"."""
    errors: dict[str, list[str]] = {}
    if not isinstance(request.tasks, list | tuple) or not request.tasks:
        raise InvalidTask({"tasks": ["A group needs a list of at least one task."]})
    if len(request.tasks) > MAX_MEMBERS:
        raise InvalidTask({"tasks": [f"A group has at most {MAX_MEMBERS} tasks; "
                                     f"got {len(request.tasks)}."]})
    members: list[store.NewTask] = []
    for index, item in enumerate(request.tasks):
        try:
            member = _request(item, now, teams)
            if member.idempotency_key is not None:
                raise InvalidTask({"idempotency_key": [
                    "A group's members take no idempotency key."]})
            if after:
                member = dataclasses.replace(member, after=(*member.after, *after))
            members.append(scheduling.validate(member, now=now, teams=teams))
        except InvalidTask as exc:
            errors.update({f"tasks[{index}].{name}": msgs for name, msgs in exc.errors.items()})
            if len(errors) >= 50:
                break
    callbacks: dict[str, store.NewTask] = {}
    for name in ("then", "on_failure"):
        item = getattr(request, name)
        if item is None:
            continue
        try:
            callback = _request(item, now, teams)
            if callback.after:
                raise InvalidTask({"after": [f"{name} waits for the group, not for `after`."]})
            callbacks[name] = dataclasses.replace(
                scheduling.validate(callback, now=now, teams=teams), held_for_group=True)
        except InvalidTask as exc:
            errors.update({f"{name}.{field}": msgs for field, msgs in exc.errors.items()})
    if errors:
        raise InvalidTask(errors)
    return members, callbacks


def schedule(request: GroupRequest, *, now: datetime | None = None,
             teams: Many[int] | None = None, after: tuple[int, ...] = ()) -> TaskGroup:
    """Schedule a group, all or nothing (inside the caller's transaction, with it): its
    callbacks `waiting`, its members as `schedule_many` would. `teams`: as
    scheduling.validate takes them; `after`: parent task ids of every member (a chain)."""
    now = now or timezone.now()
    members, callbacks = _validate_all(request, now, teams, after)
    # One shard holds the group, its members and callbacks: the parents' shard, else the
    # caller's transaction's, else the next in turn.
    try:
        home = shards.place(lambda_id=members[0].lambda_id, key=None,
                            parents={parent for member in members for parent in member.parents})
    except shards.ShardError as exc:
        raise InvalidTask({"after": [str(exc)]}) from None
    with shards.using(home), shards.atomic():
        made = dict(zip(callbacks, scheduling.create(list(callbacks.values()), now),
                        strict=True))
        group = TaskGroup.objects.create(
            team_id=directory.by_id(members[0].lambda_id).team_id, total=len(members),
            then_id=made["then"].pk if "then" in made else None,
            on_failure_id=made["on_failure"].pk if "on_failure" in made else None,
            created_at=now)
        entities: list[TaskEntity] = []
        step = atf_settings.max_batch_size
        for start in range(0, len(members), step):
            entities += scheduling.create(
                [dataclasses.replace(m, group_id=group.pk) for m in members[start:start + step]],
                now)
        # A member whose parent had already failed starts cancelled: the group has failed.
        failed = [(group.pk, TaskStatus(entity.status)) for entity in entities
                  if entity.status in UNSUCCESSFUL]
        if failed:
            guarded.members_ended(failed, now)
        scheduling.wake_on_commit(entities, now)
    if failed:
        group.refresh_from_db()
    return group


def chain(*steps: TaskRequest | GroupRequest, now: datetime | None = None) -> list[TaskEntity]:
    """Schedule steps that run one after another, each once the step before it succeeded (the
    first keeps its own `after`); all or nothing. A group step waits as a whole: every member
    waits for the step before it, and the step after it waits for the group's `then`, or is
    its `then` when it has none. The tasks of the plain steps and the groups' `then`s, in
    order."""
    now = now or timezone.now()
    entities: list[TaskEntity] = []
    previous: tuple[int, ...] = ()
    absorbed = False  # the step was the `then` of the group before it
    # The whole chain on one shard (its steps wait for each other): the first step's.
    first = steps[0] if steps else None
    try:
        home = shards.place(lambda_id=0, key=None,
                            parents=first.after if isinstance(first, TaskRequest) else ())
    except shards.ShardError as exc:
        raise InvalidTask({"after": [str(exc)]}) from None
    with shards.using(home), shards.atomic():
        for index, step in enumerate(steps):
            if absorbed:
                absorbed = False
                continue
            if isinstance(step, TaskRequest):
                entities.append(scheduling.schedule(
                    dataclasses.replace(step, after=previous) if index else step, now=now)[0])
                previous = (entities[-1].pk,)
                continue
            following = steps[index + 1] if index + 1 < len(steps) else None
            if step.then is None and isinstance(following, TaskRequest):
                step, absorbed = dataclasses.replace(step, then=following), True
            elif step.then is None and following is not None:
                raise InvalidTask({"steps": ["A group followed by a group needs a `then`."]})
            group = schedule(step, now=now, after=previous)
            if group.then_id is not None:
                entities.append(TaskEntity.objects.get(pk=group.then_id))
                previous = (group.then_id,)
    return entities


def member_counts(group: TaskGroup) -> dict[str, int]:
    """Its members' number in each status (statuses no member has are left out)."""
    return dict(TaskEntity.objects.filter(group_id=group.pk).values_list("status")
                .annotate(n=Count("id")).order_by())
