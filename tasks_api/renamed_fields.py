"""Request fields the API renamed, whose old names it still accepts for a while.

A request that uses an old name is served as if it had used the new one; its field errors
name the field as the request did, and its answer carries `Deprecation: true` and a `Warning`
that names the new field (docs/api.md#renamed-fields). Answers show both names meanwhile.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from rest_framework.response import Response

logger = logging.getLogger(__name__)

#: A periodic task's body: old name -> new name (durations a caller gives are plain seconds).
PERIODIC = {"interval_s": "interval"}


def accept(data: Any, renamed: Mapping[str, str]) -> tuple[Any, dict[str, str]]:
    """`data` with each old name given replaced by its new name (unless both are given, which
    is left for the serializer to refuse as an unknown field), and new -> old for those."""
    if not isinstance(data, Mapping):
        return data, {}
    used = {new: old for old, new in renamed.items() if old in data and new not in data}
    if not used:
        return data, used
    body = {key: value for key, value in data.items() if key not in used.values()}
    body.update({new: data[old] for new, old in used.items()})
    return body, used


def renamed(errors: Mapping[str, Any], names: Mapping[str, str]) -> dict[str, Any]:
    """Field errors with each name in `names` replaced by its value there: the names the
    request used (`used` from `accept`), or the API's names of model fields."""
    return {names.get(name, name): problems for name, problems in errors.items()}


def mark(response: Response, used: Mapping[str, str]) -> Response:
    """Tell the caller which old names it used (and log it, to find the callers)."""
    if used:
        names = ", ".join(f"{old} (now {new})" for new, old in used.items())
        response["Deprecation"] = "true"
        response["Warning"] = f'299 - "deprecated field names: {names}"'
        logger.warning("a request used deprecated field names: %s", names,
                       extra={"action": "deprecated_field"})
    return response
