"""What a lambda may be called: the one rule, checked wherever a name enters (atf.register,
`@task(lambda_name=...)`, runworker's arguments, the API).

1 to 200 (the column's length) ASCII letters, digits and `_ - . :`, e.g. `billing.send_invoice`
or `shop:receipts-v2`: no spaces, slashes or other characters that a command line, a URL or a
log line would have to quote.
"""

from __future__ import annotations

import re
from typing import Any

from tasks_core.exceptions import InvalidLambdaDefinition
from tasks_core.limits import LAMBDA_NAME_CHARS

LAMBDA_NAME = re.compile(rf"[A-Za-z0-9_.:-]{{1,{LAMBDA_NAME_CHARS}}}")
RULE = f"1 to {LAMBDA_NAME_CHARS} ASCII letters, digits and _ - . :"
#: Characters of a bad name that a message shows.
SHOWN_CHARS = 60


class InvalidLambdaName(InvalidLambdaDefinition, ValueError):
    """A lambda's name breaks the rule."""


def problem(name: Any) -> str | None:
    """Why `name` cannot name a lambda, or None when it can."""
    if isinstance(name, str) and LAMBDA_NAME.fullmatch(name):
        return None
    long = isinstance(name, str) and len(name) > SHOWN_CHARS
    shown = f"{name[:SHOWN_CHARS]!r}…" if long else repr(name)
    return f"{shown} is not a lambda name: use {RULE}."


def check(name: Any) -> None:
    """Raise InvalidLambdaName unless `name` can name a lambda."""
    if message := problem(name):
        raise InvalidLambdaName(message)
