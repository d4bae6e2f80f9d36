"""A lambda's options, each declared once: name, type, bounds, default, unit and whether an
operator may override it.

`OptionValues` below is the declaration: a field per option, its type the option's type (an
`int` option is a whole number; `| None` means None is a value: no limit), its metadata the
rest. Every reader takes the options from here:

- `atf.register` (its keywords, their defaults and checks) and the registry's `LambdaOptions`;
- the directory's `LambdaInfo` (a cached row) and `lambda_sync`, which writes each option's
  code value to its `Lambda` column; the column's default, validator and help text come from
  here too (`column`);
- operators' overrides (`tasks_core.overrides`), and through them the API's lambda and
  override serializers, the console's options form and `atf_lambda`'s flags;
- the Django tasks backend's `@task` options (`tasks_core.contrib.task_options`).

Adding an option is one field of `OptionValues`, plus the code that uses its value.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, get_args, get_type_hints

from django.core.exceptions import ValidationError
from django.db import models
from django.utils.deconstruct import deconstructible

from tasks_core import limits, rates
from tasks_core.conf import atf_settings
from tasks_core.exceptions import InvalidLambdaOption, UnknownLambdaOption
from tasks_core.heartbeat_rule import MAX_FAILED_HEARTBEATS, outlasts_heartbeats

#: Largest number of seconds an option accepts (about 30 years).
MAX_SECONDS = 1e9
#: Highest scheduling quota, in tasks per second.
MAX_QUOTA_PER_S = 1e6

#: Highest concurrency limit.
MAX_CONCURRENCY = 1_000_000
#: Highest start rate, in starts per second (each start in a rate's window is a log row).
MAX_RATE_PER_S = 1000.0

#: A further rule for a value already known to be a finite number: the problem, or None.
Rule = Callable[[float], "str | None"]


def _outlasts_heartbeats(value: float) -> str | None:
    # A worker cuts itself off only after this many silent intervals, so a shorter timeout
    # could enqueue a running task again; workers refuse to start with one.
    interval_s = atf_settings.heartbeat_interval_s
    if not outlasts_heartbeats(value, interval_s) or value > MAX_SECONDS:
        return (f"Give more than {MAX_FAILED_HEARTBEATS * interval_s:g} "
                f"({MAX_FAILED_HEARTBEATS} heartbeat intervals of {interval_s:g} s), "
                f"at most {MAX_SECONDS:g}.")
    return None


def _default_timeout_s() -> float | None:
    """ATF_TASK_TIMEOUT_S as seconds; None for no limit (the setting is 0 or None)."""
    value = atf_settings.task_timeout_s
    return None if value is None else float(value) or None


def _declare(*, name: str, text: str, unit: str, default: Callable[[], float | None],
             least: float, most: float, above: bool = False, rule: Rule | None = None,
             overridable: bool = True, per_task: bool = False,
             zero_is_none: bool = False, is_rate: bool = False) -> Any:
    """One option's field of OptionValues (see `Option` for what each argument means)."""
    return field(metadata={"option": {
        "name": name, "text": text, "unit": unit, "default": default, "least": least,
        "most": most, "above": above, "rule": rule, "overridable": overridable,
        "per_task": per_task, "zero_is_none": zero_is_none, "is_rate": is_rate}})


@dataclass(frozen=True, kw_only=True)
class OptionValues:
    """A value for every option of a lambda; its fields declare the options."""

    quota_per_s: float | None = _declare(
        name="quota", text="tasks per second the consumer may enqueue (none: no limit)",
        unit="tasks per second", default=lambda: None, least=0, above=True,
        most=MAX_QUOTA_PER_S)
    max_attempts: int = _declare(
        name="max_attempts", text="attempts before a task is dead", unit="attempts",
        default=lambda: atf_settings.max_attempts, least=1, most=limits.MAX_ATTEMPTS,
        per_task=True)
    heartbeat_timeout_s: float = _declare(
        name="heartbeat_timeout", text="seconds a running task may go without a heartbeat",
        unit="seconds", default=lambda: atf_settings.heartbeat_timeout_s, least=0, above=True,
        most=MAX_SECONDS, rule=_outlasts_heartbeats)
    backoff_base_s: float = _declare(
        name="backoff_base", text="seconds of the first retry's backoff ceiling",
        unit="seconds", default=lambda: atf_settings.backoff_base_s, least=0, most=MAX_SECONDS)
    backoff_cap_s: float = _declare(
        name="backoff_cap", text="most seconds of backoff before a retry", unit="seconds",
        default=lambda: atf_settings.backoff_cap_s, least=0, above=True, most=MAX_SECONDS)
    # Flow control, fleet-wide where a task starts (tasks_core.flow). A rate is starts a
    # second here; register, the API and atf_lambda also take "N/s", "N/m" or "N/h".
    concurrency: int | None = _declare(
        name="concurrency", text="tasks running at once, fleet-wide (none: no limit)",
        unit="tasks", default=lambda: None, least=1, most=MAX_CONCURRENCY)
    rate_per_s: float | None = _declare(
        name="rate", text="starts per second, fleet-wide, in a sliding window (none: no limit)",
        unit="starts per second", default=lambda: None, least=0, above=True,
        most=MAX_RATE_PER_S, is_rate=True)
    key_concurrency: int | None = _declare(
        name="key_concurrency", text="tasks of one limit_key running at once (none: no limit)",
        unit="tasks", default=lambda: None, least=1, most=MAX_CONCURRENCY)
    key_rate_per_s: float | None = _declare(
        name="key_rate", text="starts per second of one limit_key (none: no limit)",
        unit="starts per second", default=lambda: None, least=0, above=True,
        most=MAX_RATE_PER_S, is_rate=True)
    #: Seconds one attempt may run; None: no limit.
    timeout_s: float | None = _declare(
        name="timeout", text="seconds one attempt may run (0: no limit)", unit="seconds",
        default=_default_timeout_s, least=0, most=MAX_SECONDS, per_task=True,
        zero_is_none=True)


@dataclass(frozen=True, kw_only=True)
class Option:
    """One declared option, as its readers use it."""

    name: str  #: as `register`, `@task`, the API, the console and `atf_lambda` spell it
    column: str  #: its field of OptionValues, LambdaOptions and LambdaInfo, and its Lambda column
    whole: bool  #: a whole number (the field is an int)
    nullable: bool  #: None is a value (no limit)
    text: str  #: what it means, with its unit
    unit: str
    default: Callable[[], float | None]  #: the value of a lambda registered without it
    least: float  #: the lowest value (1 for a whole number of attempts, say)
    above: bool  #: the value must be above `least`, not equal to it
    most: float
    rule: Rule | None  #: a further rule, with a message of its own (heartbeat_timeout's)
    overridable: bool  #: an operator may override the code's value
    per_task: bool  #: a task may ask for its own value when it is scheduled
    zero_is_none: bool  #: `register(...=0)` means None (no limit)
    is_rate: bool  #: starts per second, also given as "N/s", "N/m" or "N/h" (tasks_core.rates)

    def given(self, raw: Any) -> Any:
        """A value as code, the API or a command gives it, with a rate's text read as a
        number; anything else unchanged (the bounds' checks say what is wrong with it)."""
        if self.is_rate and isinstance(raw, str) and (value := rates.per_second(raw)) is not None:
            return value
        return raw

    def problem(self, value: float) -> str | None:
        """Why a finite number cannot be this option's value (an operator's message), or None."""
        if self.rule is not None:
            return self.rule(value)
        if self.whole:
            fits = value == int(value) and self.least <= value <= self.most
            return None if fits else f"Give a whole number from {self.least:g} to {self.most:g}."
        if self.above:
            fits = self.least < value <= self.most
            return None if fits else \
                f"Give a number above {self.least:g} and at most {self.most:g}."
        fits = self.least <= value <= self.most
        return None if fits else f"Give {self.least:g} or more, at most {self.most:g}."

    def code_problem(self, value: Any) -> str | None:
        """Why `value` cannot be this option's value in code (`register`, `@task`), or None.

        The bounds' ends only: a rule that depends on settings (heartbeat_timeout's) is the
        workers' start check (atf.E003), since settings may change before a worker starts.
        """
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if self.whole and not (isinstance(value, int) and number and value >= self.least):
            return f"{self.name} must be a whole number of at least {self.least:g}"
        if self.above and not (number and value > self.least):
            return f"{self.name} must be a number above {self.least:g}"
        if not (number and value >= self.least):
            return f"{self.name} must be a number of {self.unit}, {self.least:g} or more"
        if value > self.most:
            return f"{self.name} must be at most {self.most:g}"
        return None


def _declared() -> tuple[Option, ...]:
    hints = get_type_hints(OptionValues)
    return tuple(
        Option(column=f.name, whole=int in (hints[f.name], *get_args(hints[f.name])),
               nullable=types.NoneType in get_args(hints[f.name]), **f.metadata["option"])
        for f in fields(OptionValues))


OPTIONS: tuple[Option, ...] = _declared()
BY_NAME: Mapping[str, Option] = {option.name: option for option in OPTIONS}
#: The options an operator may override (tasks_core.overrides).
OVERRIDABLE: tuple[Option, ...] = tuple(option for option in OPTIONS if option.overridable)


def code_values(given: Mapping[str, Any]) -> dict[str, Any]:
    """Column -> value of every option, for a lambda registered with `given` (name -> value,
    None for the default): UnknownLambdaOption (a TypeError) for a name that is no option,
    InvalidLambdaOption (a ValueError) for bad values."""
    unknown = sorted(set(given) - set(BY_NAME))
    if unknown:
        raise UnknownLambdaOption(f"unknown option(s) {', '.join(unknown)}; the options are "
                        f"{', '.join(BY_NAME)}")
    given = {name: BY_NAME[name].given(value) for name, value in given.items()}
    problems = [problem for name, value in given.items() if value is not None
                if (problem := BY_NAME[name].code_problem(value))]
    if problems:
        raise InvalidLambdaOption("; ".join(problems))
    values = {}
    for option in OPTIONS:
        value = given.get(option.name)
        if value is None:
            value = option.default()
        elif option.zero_is_none and value == 0:
            value = None
        values[option.column] = value
    return values


def defaulted(given: Mapping[str, Any]) -> frozenset[str]:
    """The names of the options `given` leaves to their defaults (absent, or None)."""
    return frozenset(option.name for option in OPTIONS if given.get(option.name) is None)


@deconstructible(path="tasks_core.lambda_options.DeclaredDefault")
class DeclaredDefault:
    """A Lambda column's default, for a row made other than by a code sync (a test's, say):
    its option's declared default as it is when the row is made; None (no limit) where None
    is a value, since the row has no code that asked for a limit."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self) -> float | None:
        option = BY_NAME[self.name]
        return None if option.nullable else option.default()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DeclaredDefault) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)


@deconstructible(path="tasks_core.lambda_options.DeclaredBounds")
class DeclaredBounds:
    """A Lambda column's validator: its option's declared bounds (the operator's messages)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, value: float | None) -> None:
        if value is not None and (problem := BY_NAME[self.name].problem(float(value))):
            raise ValidationError(problem)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DeclaredBounds) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)


def column(name: str) -> models.Field:
    """The Lambda column that holds option `name`'s code value, from its declaration."""
    option = BY_NAME[name]
    field_class = models.PositiveIntegerField if option.whole else models.FloatField
    return field_class(default=DeclaredDefault(name), validators=[DeclaredBounds(name)],
                       null=option.nullable, blank=option.nullable, help_text=option.text)
