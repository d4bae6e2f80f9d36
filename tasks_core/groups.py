"""Groups with callbacks (fan-out / fan-in): `atf.group([...], then=..., on_failure=...)`.

A group's members are scheduled together, in one transaction and one insert statement per
ATF_MAX_BATCH_SIZE of them, each carrying the group's id and its place in it; its callbacks
are inserted `waiting` and only the group's end releases one of them (tasks_core.store.groups):
`then` once every member succeeded, `on_failure` once one ended fatal_failure, dead, cancelled
or dropped. A member may be a chain (`ChainRequest`), and a member's idempotency key may name
an existing task, which becomes the member (tasks_core.group_members). A group's own
idempotency key makes a second schedule of it return the first group.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection as Many
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError
from django.db.models import Count, QuerySet
from django.utils import timezone

from tasks_core import directory, group_members, scheduling, shards, store
from tasks_core.exceptions import InvalidTask
from tasks_core.group_members import Member
from tasks_core.models import TaskEntity, TaskGroup
from tasks_core.scheduling import TaskRequest
from tasks_core.store import guarded

#: Tasks one group may have: its members and its chain members' steps.
MAX_MEMBERS = 100_000
#: Steps one chain member may have.
MAX_CHAIN_STEPS = 100
#: Errors one refusal names at most.
_MOST_ERRORS = 50


@dataclass(frozen=True, slots=True)
class ChainRequest:
    """A group member whose steps run one after another (Celery's chain inside a group), each
    once the one before it succeeded. Its last step is the member: the member succeeded when
    it did, and `then` reads its result; a step that ends fatal_failure, dead, cancelled or
    dropped cancels the steps after it, and so fails the group. Its steps are tasks, without
    idempotency keys; only the first may have an `after`."""

    steps: Sequence[TaskRequest | Mapping[str, Any]]


@dataclass(frozen=True, slots=True)
class GroupRequest:
    """A group to schedule: its members (tasks, or chains as `ChainRequest` or a mapping
    {"chain": [...]}) and the callbacks of its end. A step of `atf.chain` as well: the step
    before it is every member's parent, and the step after it waits for `then` (or, with no
    `then`, is the `then`). With an `idempotency_key`, a second schedule of a group with that
    key in its team returns the first group, as it is."""

    tasks: Sequence[TaskRequest | ChainRequest | Mapping[str, Any]]
    then: TaskRequest | Mapping[str, Any] | None = None
    on_failure: TaskRequest | Mapping[str, Any] | None = None
    idempotency_key: str | None = None


def _request(item: TaskRequest | Mapping[str, Any], now: datetime,
             teams: Many[int] | None) -> TaskRequest:
    return item if isinstance(item, TaskRequest) else TaskRequest.from_json(item, now=now,
                                                                            teams=teams)


def _chain_steps(item: Any) -> Sequence[Any] | None:
    """The steps of a chain member (a ChainRequest, or a mapping of just "chain"); None for
    any other member."""
    if isinstance(item, ChainRequest):
        return item.steps
    if isinstance(item, Mapping) and "chain" in item:
        if set(item) != {"chain"}:
            raise InvalidTask({"chain": ["A chain member has only `chain`, its list of steps."]})
        return item["chain"]
    return None


def tasks_in(request: GroupRequest) -> int:
    """The tasks a group request asks for, its callbacks and chains' steps counted (before it
    is validated: what is not a list of steps counts as one)."""
    chains = [_safe_chain_steps(item) for item in request.tasks]
    return sum(len(steps) if isinstance(steps, list | tuple) else 1 for steps in chains) + \
        (request.then is not None) + (request.on_failure is not None)


def _safe_chain_steps(item: Any) -> Sequence[Any] | None:
    try:
        return _chain_steps(item)
    except InvalidTask:
        return None


def parents_named(request: GroupRequest) -> list[int]:
    """The task ids a group request's tasks name in `after` (before it is validated)."""
    tasks: list[Any] = []
    for item in request.tasks:
        steps = _safe_chain_steps(item)
        tasks += steps if isinstance(steps, list | tuple) else [item]
    named = [getattr(task, "after", None) if isinstance(task, TaskRequest)
             else task.get("after") if isinstance(task, Mapping) else None for task in tasks]
    return [pk for after in named if isinstance(after, list | tuple)
            for pk in after if type(pk) is int]


def _validate_task(item: Any, now: datetime, teams: Many[int] | None,
                   after: tuple[int, ...]) -> store.NewTask:
    """A member's task, or a chain's step: waiting for `after` too."""
    task = _request(item, now, teams)
    if after:
        task = dataclasses.replace(task, after=(*task.after, *after))
    return scheduling.validate(task, now=now, teams=teams)


def _validate_chain(steps: Any, now: datetime, teams: Many[int] | None,
                    after: tuple[int, ...]) -> Member:
    """A chain member; InvalidTask keyed "chain" or "chain[j].field"."""
    if not isinstance(steps, list | tuple) or not steps:
        raise InvalidTask({"chain": ["A chain member needs a list of at least one step."]})
    if len(steps) > MAX_CHAIN_STEPS:
        raise InvalidTask({"chain": [f"A chain member has at most {MAX_CHAIN_STEPS} steps; "
                                     f"got {len(steps)}."]})
    errors: dict[str, list[str]] = {}
    tasks: list[store.NewTask] = []
    for index, step in enumerate(steps):
        try:
            if _chain_steps(step) is not None or isinstance(step, GroupRequest):
                raise InvalidTask({"non_field_errors": ["A chain member's steps are tasks."]})
            request = _request(step, now, teams)
            if request.idempotency_key is not None:
                raise InvalidTask({"idempotency_key": [
                    "A chain member's steps take no idempotency key: give the group one."]})
            if index and request.after:
                raise InvalidTask({"after": [
                    "A chain's step waits for the step before it, not for `after`."]})
            tasks.append(_validate_task(request, now, teams, () if index else after))
        except InvalidTask as exc:
            errors.update({f"chain[{index}].{name}": msgs for name, msgs in exc.errors.items()})
    if errors:
        raise InvalidTask(errors)
    return Member(task=tasks[-1], before=tuple(tasks[:-1]))


def _validate_member(item: Any, now: datetime, teams: Many[int] | None,
                     after: tuple[int, ...]) -> Member:
    steps = _chain_steps(item)
    if steps is not None:
        return _validate_chain(steps, now, teams, after)
    return Member(task=_validate_task(item, now, teams, after))


def _validate_all(request: GroupRequest, now: datetime, teams: Many[int] | None,
                  after: tuple[int, ...]) -> tuple[list[Member], dict[str, store.NewTask]]:
    """The members and callbacks to insert; InvalidTask with every error, keyed
    "tasks[i].field" (a chain's "tasks[i].chain[j].field"), "then.field", "on_failure.field"
    and "idempotency_key"."""
    errors: dict[str, list[str]] = {}
    if not isinstance(request.tasks, list | tuple) or not request.tasks:
        raise InvalidTask({"tasks": ["A group needs a list of at least one task."]})
    if (count := tasks_in(request)) > MAX_MEMBERS:
        raise InvalidTask({"tasks": [f"A group has at most {MAX_MEMBERS} tasks; got {count}."]})
    if problems := scheduling.idempotency_key_errors(request.idempotency_key):
        errors["idempotency_key"] = problems
    members: list[Member] = []
    keys: dict[tuple[int, str], int] = {}
    for index, item in enumerate(request.tasks):
        try:
            member = _validate_member(item, now, teams, after)
            members.append(member)
            if (key := member.task.idempotency_key) is not None and \
                    (first := keys.setdefault((member.task.lambda_id, key), index)) != index:
                raise InvalidTask({"idempotency_key": [
                    f"Repeats the idempotency key of tasks[{first}]."]})
        except InvalidTask as exc:
            errors.update({f"tasks[{index}].{name}": msgs for name, msgs in exc.errors.items()})
            if len(errors) >= _MOST_ERRORS:
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
            if callback.idempotency_key is not None:
                raise InvalidTask({"idempotency_key": [
                    f"{name} takes no idempotency key: give the group one."]})
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
    return place(request, now=now, teams=teams, after=after)[0]


def place(request: GroupRequest, *, now: datetime | None = None,
          teams: Many[int] | None = None,
          after: tuple[int, ...] = ()) -> tuple[TaskGroup, bool]:
    """`schedule`, and whether the group was made (False: its idempotency key named an
    earlier group of its team, which is returned as it is)."""
    now = now or timezone.now()
    members, callbacks = _validate_all(request, now, teams, after)
    team_id = directory.by_id(members[0].task.lambda_id).team_id
    try:
        home = _home(request, members)
    except shards.ShardError as exc:
        raise InvalidTask({"tasks": [str(exc)]}) from None
    keyed = request.idempotency_key is not None or any(
        member.task.idempotency_key is not None for member in members)
    # A key taken by a concurrent schedule fails the insert once that one commits; the next
    # try finds its group, or its task (which joins this group, or refuses it). Each try finds
    # one more key taken: a bound on the tries.
    tries = len(members) + 2 if keyed else 1
    with shards.using(home):
        while True:
            if (found := _keyed_group(team_id, request.idempotency_key)) is not None:
                return found, False
            tries -= 1
            try:
                with shards.atomic():  # a savepoint: the caller's transaction goes on
                    return (_insert(team_id, request.idempotency_key, members, callbacks, now),
                            True)
            except IntegrityError:
                if not tries:
                    raise


def _home(request: GroupRequest, members: list[Member]) -> str:
    """The one shard that holds a group, its members and its callbacks: the shard its
    members' parents, its own key and its members' keys name (ShardError where they name more
    than one: a key's task lives on its key's shard), else the caller's transaction's, else
    the next in turn."""
    if not shards.sharded():
        return shards.current()
    first = members[0].task.lambda_id
    parents = {parent for member in members
               for parent in (member.before[0] if member.before else member.task).parents}
    named = {shards.key_alias(member.task.lambda_id, member.task.idempotency_key)
             for member in members if member.task.idempotency_key is not None}
    if request.idempotency_key is not None:
        named.add(shards.key_alias(first, request.idempotency_key))
    if (parents_home := shards.home_of(parents)) is not None:
        named.add(parents_home)
    if len(named) > 1:
        raise shards.ShardError("The group's parents and idempotency keys live on different "
                                f"shards ({', '.join(sorted(named))}); a group lives on one.")
    return named.pop() if named else shards.place(lambda_id=first, key=None)


def _keyed_group(team_id: int, key: str | None) -> TaskGroup | None:
    if key is None:
        return None
    return TaskGroup.objects.filter(team_id=team_id, idempotency_key=key).first()


def _insert(team_id: int, key: str | None, members: list[Member],
            callbacks: dict[str, store.NewTask], now: datetime) -> TaskGroup:
    """Insert a group, its callbacks and its members (inside the caller's transaction)."""
    made = dict(zip(callbacks, scheduling.create(list(callbacks.values()), now), strict=True))
    group = TaskGroup.objects.create(
        team_id=team_id, total=len(members), idempotency_key=key,
        then_id=made["then"].pk if "then" in made else None,
        on_failure_id=made["on_failure"].pk if "on_failure" in made else None,
        created_at=now)
    entities, ends = group_members.insert(group, members, now)
    # A member that had already ended (its key's task; a member whose parent had failed)
    # counts at once: the group may end before it is even committed.
    if ends:
        guarded.members_ended(ends, now)
        group.refresh_from_db()
    scheduling.wake_on_commit(entities, now)
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


def members_in_order(group: TaskGroup) -> QuerySet[TaskEntity]:
    """A group's members in their order in it."""
    return group.members.order_by("group_position")


def member_counts(group: TaskGroup) -> dict[str, int]:
    """Its members' number in each status (statuses no member has are left out)."""
    return dict(TaskEntity.objects.filter(group_id=group.pk).values_list("status")
                .annotate(n=Count("id")).order_by())
