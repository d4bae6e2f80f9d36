"""The standalone service's environment: each variable read as its type, and a check of the
`ATF_*` variables that nothing reads.

A variable that cannot be read stops the process in one line that names it (`SystemExit`:
exit status 1, whatever command loads the settings); a misspelt `ATF_*` variable would be
ignored without a word, so `manage.py check` warns of it (atf.W005) with the closest known name.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from django.core import checks

from tasks_core import conf

T = TypeVar("T")


def read(parse: Callable[[], T]) -> T:
    """`parse()`'s value; a variable it cannot read ends the process in one line naming it."""
    try:
        return parse()
    except conf.UnreadableSetting as exc:
        raise SystemExit(f"environment variable {exc}") from None


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_int(name: str, default: int) -> int:
    return _typed(name, default, int)


def env_bool(name: str, default: bool) -> bool:
    return _typed(name, default, bool)


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def _typed(name: str, default: T, kind: type[T]) -> T:
    if name not in os.environ:
        return default
    return read(lambda: conf.parse_text(name, os.environ[name], kind))  # type: ignore[arg-type]


def atf_settings(environ: Mapping[str, str]) -> dict[str, Any]:
    """The ATF settings that `environ` sets, each read as its type (tasks_core.conf)."""
    return read(lambda: conf.from_environment(environ))


@checks.register("atf")
def check_unknown_variables(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """atf.W005: an `ATF_*` environment variable that nothing of ATF reads, most likely
    misspelt."""
    return [checks.Warning(
        f"environment variable {name} is not an ATF setting; it is ignored",
        hint=f"Did you mean {close}?" if close else "See the settings reference.", id="atf.W005")
            for name, close in sorted(conf.unknown_variables(os.environ).items())]
