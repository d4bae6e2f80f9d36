"""Per-lambda options: the code's value, an operator's override that wins, and which applies.

The code's value lives in the Lambda row's own column, which every code sync rewrites (an
option the code left to its default is read from this process's settings instead: see
`code_value`); an operator's value lives in a LambdaOverride row, which no sync touches. So
an override survives restarts, `migrate` and new code, and clearing it returns to the code's
current value. Every reader of an option's value (the directory, the consumer) goes through
here.

Which options there are, their bounds and which an operator may override, is declared in
tasks_core.lambda_options.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import F, OuterRef, Subquery
from django.db.models.expressions import Expression
from django.db.models.functions import Coalesce

from tasks_core import lambda_options, shards
from tasks_core.exceptions import InvalidOverride
from tasks_core.lambda_options import Option
from tasks_core.models import Lambda, LambdaOverride

logger = logging.getLogger(__name__)

CODE = "code"
OPERATOR = "operator"

#: The options an operator may override, as tasks_core.lambda_options declares them.
OPTIONS: tuple[Option, ...] = lambda_options.OVERRIDABLE
BY_NAME: Mapping[str, Option] = {option.name: option for option in OPTIONS}


@dataclass(frozen=True, kw_only=True)
class Resolved:
    """One option's value in effect, and where it comes from."""

    value: float | int | None
    source: str  #: CODE or OPERATOR
    code_value: float | int | None
    changed_by: str | None = None  #: who set the override (operator values only)
    changed_at: datetime | None = None


def _typed(option: Option, value: float | None) -> float | int | None:
    if value is None:
        return None
    return int(value) if option.whole else float(value)


def code_value(row: Lambda, option: Option) -> float | int | None:
    """The code's value of `option` for `row`: its column, or for an option the code left to
    its default (`row.defaulted`), the default as this process's settings make it."""
    if option.name in row.defaulted:
        return _typed(option, option.default())
    return _typed(option, getattr(row, option.column))


def resolve(row: Lambda) -> dict[str, Resolved]:
    """Every option of `row` an operator may override: its value, source and, for an override,
    who set it and when.

    Reads `row.overrides.all()`, so prefetch "overrides" when resolving many rows.
    """
    found = {override.option: override for override in row.overrides.all()}
    resolved = {}
    for option in OPTIONS:
        code = code_value(row, option)
        override = found.get(option.name)
        if override is None:
            resolved[option.name] = Resolved(value=code, source=CODE, code_value=code)
        else:
            resolved[option.name] = Resolved(
                value=_typed(option, override.value), source=OPERATOR, code_value=code,
                changed_by=override.changed_by, changed_at=override.changed_at)
    return resolved


def effective(row: Lambda) -> dict[str, Any]:
    """Column name -> value in effect, for every option of `row`: an operator's override where
    one may override it and did (see `resolve`), else the code's."""
    values = {option.column: code_value(row, option) for option in lambda_options.OPTIONS
              if option.name not in BY_NAME}
    values.update({BY_NAME[name].column: item.value for name, item in resolve(row).items()})
    return values


def effective_expression(name: str) -> Expression:
    """A query expression for the value of option `name` in effect, on Lambda querysets.

    It reads the column, so it is right only for an option whose default is no setting (the
    consumer's `quota`, None by default): for one left to a setting, `code_value` reads this
    process's settings instead, which no query can."""
    option = BY_NAME[name]
    operator_value = LambdaOverride.objects.filter(lambda_ref=OuterRef("pk"), option=name)
    return Coalesce(Subquery(operator_value.values("value")[:1]), F(option.column))


def check(changes: Mapping[str, Any]) -> dict[str, float | int | None]:
    """The changes as typed values (None clears an override); InvalidOverride lists every
    unknown option and bad value by name."""
    errors: dict[str, list[str]] = {}
    cleaned: dict[str, float | int | None] = {}
    for name, raw in changes.items():
        option = BY_NAME.get(name)
        if option is None:
            errors[str(name)[:100]] = ["Unknown option; use " + ", ".join(BY_NAME) + "."]
            continue
        if raw is None:
            cleaned[name] = None
            continue
        value = _number(option.given(raw))
        problem = "Give a number, or null to clear the override." if value is None \
            else option.problem(value)
        if problem:
            errors[name] = [problem]
        else:
            cleaned[name] = _typed(option, value)
    if errors:
        raise InvalidOverride(errors)
    return cleaned


def _number(raw: Any) -> float | None:
    """A finite number from JSON or text; None for anything else (booleans included)."""
    if isinstance(raw, bool):
        return None
    try:
        value = float(raw.strip() if isinstance(raw, str) else raw)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def apply(row: Lambda, changes: Mapping[str, Any], *, by: str, now: datetime) -> None:
    """Set (a value) or clear (None) operator overrides of `row`, recording `by` and `now`.

    Validates everything first: a bad value changes nothing (InvalidOverride). The directory
    reads values through this module, so this does not import it: the caller clears its cache
    (operations.set_options does), and other processes see the change within its TTL.
    """
    cleaned = check(changes)
    with transaction.atomic():
        for name, value in cleaned.items():
            if value is None:
                LambdaOverride.objects.filter(lambda_ref=row, option=name).delete()
            else:
                LambdaOverride.objects.update_or_create(
                    lambda_ref=row, option=name,
                    defaults={"value": value, "changed_by": by[:200], "changed_at": now})
    shards.mirror()  # the shards' consumers read the quota in effect from their copies
    for name, value in cleaned.items():
        logger.info("%s of %s %s by %s", name, row.name,
                    "cleared" if value is None else f"set to {value:g}", by,
                    extra={"action": "override_set", "lambda": row.name, "option": name})


def reset(row: Lambda, *, by: str, now: datetime) -> None:
    """Clear every override of `row`: each option returns to the code's value."""
    apply(row, dict.fromkeys(BY_NAME), by=by, now=now)
