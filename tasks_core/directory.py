"""Cached reads of Lambda rows, so that hot paths (schedule, claim, heartbeat) do not query them.

Entries live `TTL_S` seconds; an operator's change to a lambda's options shows within that time.
Options carry the value in effect: an operator's override, else the code's (tasks_core.overrides).
Gates are not cached here: the consumer reads them fresh on every poll.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from django.db import transaction
from django.db.models import QuerySet

from tasks_core import overrides
from tasks_core.exceptions import LambdaNotFound
from tasks_core.lambda_options import OptionValues
from tasks_core.models import Lambda

TTL_S = 5.0


@dataclass(frozen=True, kw_only=True)
class LambdaInfo(OptionValues):
    """A Lambda row as the hot paths read it: each option's value in effect."""

    id: int
    name: str
    team_id: int


_lock = threading.Lock()
_by_name: dict[str, tuple[float, LambdaInfo]] = {}
_by_id: dict[int, tuple[float, LambdaInfo]] = {}
_collections: set[tuple[int, str]] = set()


def _unknown(name: str) -> bool:
    return False


#: Called with a name the store has no row for; True once it has made one (a lambda registered
#: in code but not yet synced). tasks_core.apps sets it to lambda_sync.sync_if_registered.
_on_unknown: Callable[[str], bool] = _unknown


def on_unknown(handler: Callable[[str], bool]) -> None:
    """Make `handler` the one by_name() asks about a name the store does not know."""
    global _on_unknown
    _on_unknown = handler


def _rows() -> QuerySet[Lambda]:
    return Lambda.objects.prefetch_related("overrides")


def _info(row: Lambda) -> LambdaInfo:
    return LambdaInfo(id=row.pk, name=row.name, team_id=row.team_id, **overrides.effective(row))


def _remember(info: LambdaInfo) -> LambdaInfo:
    expires = time.monotonic() + TTL_S
    with _lock:
        _by_name[info.name] = (expires, info)
        _by_id[info.id] = (expires, info)
    return info


def _cached(table: dict, key: object) -> LambdaInfo | None:
    entry = table.get(key)
    if entry is not None and entry[0] > time.monotonic():
        return entry[1]
    return None


def by_name(name: str) -> LambdaInfo:
    """The lambda called `name`; LambdaNotFound if the store has no such row."""
    info = _cached(_by_name, name)
    if info is None:
        row = _rows().filter(name=name).first()
        if row is None:
            if not _on_unknown(name):
                raise LambdaNotFound(f"unknown lambda {name!r}")
            row = _rows().get(name=name)
        info = _remember(_info(row))
    return info


def by_id(lambda_id: int) -> LambdaInfo:
    """The lambda with primary key `lambda_id`."""
    info = _cached(_by_id, lambda_id)
    if info is None:
        info = _remember(_info(_rows().get(pk=lambda_id)))
    return info


def unknown_collections(pairs: Iterable[tuple[int, str]]) -> list[tuple[int, str]]:
    """The (lambda id, collection name) pairs not known to have a Collection row: the insert
    of the tasks naming them makes the missing rows (tasks_core.store.create)."""
    return sorted(set(pairs) - _collections)


def remember_collections(pairs: Iterable[tuple[int, str]]) -> None:
    """Know these pairs have rows once the caller's transaction commits (at once outside one):
    a rolled-back caller takes the new rows with it."""
    known = set(pairs)
    if known:
        transaction.on_commit(lambda: _collections.update(known))


def clear() -> None:
    """Forget everything (after the store was flushed or migrated)."""
    with _lock:
        _by_name.clear()
        _by_id.clear()
        _collections.clear()
