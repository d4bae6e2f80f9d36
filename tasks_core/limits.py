"""The limits every front end applies (Python callers, the API, the console, the commands), once.

Sizes an operator may tune are settings, read when used (payload bytes and depth, batch size,
idempotency key length); the rest are fixed here. Serializers and forms take their lengths
from this module so that the OpenAPI schema tells the same limits that scheduling enforces.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from tasks_core.conf import atf_settings
from tasks_core.exceptions import InvalidTask

#: Characters of a lambda name (its column's length).
LAMBDA_NAME_CHARS = 200
#: Characters of a collection name.
COLLECTION_CHARS = 100
#: What a collection may be called: ASCII letters, digits and . _ : -, starting with a letter or
#: digit (no spaces, slashes, control or bidirectional characters).
COLLECTION_NAME = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._:-]{{0,{COLLECTION_CHARS - 1}}}")
#: Characters of a priority name.
PRIORITY_CHARS = 32
#: Characters of an idempotency key the column holds; ATF_MAX_IDEMPOTENCY_KEY_LENGTH may lower it.
IDEMPOTENCY_KEY_COLUMN_CHARS = 255
#: Longest delay accepted: ten years.
MAX_DELAY_S = 10 * 365 * 86400.0
#: Most attempts a task may ask for.
MAX_ATTEMPTS = 10_000
#: Most parents (`after`) one task may wait for.
MAX_PARENTS = 100
#: Most task ids one operator request names.
MAX_IDS = 10_000
#: Largest task id (a PostgreSQL bigint).
MAX_TASK_ID = 2**63 - 1
#: Most tasks, leases or results in one request of the worker API.
MAX_WORKER_BATCH = 1000
#: Longest text of a reported error's type, message and traceback.
MAX_ERROR_CHARS = {"type": 200, "message": 10_000, "traceback": 100_000}
#: Deepest nesting of objects and arrays in a result a remote worker reports (as deep as a
#: payload may be by default, ATF_MAX_PAYLOAD_DEPTH).
MAX_RESULT_DEPTH = 100
#: Attempts a task's answer (the API) or page (the console) shows, its latest: an attempt's error
#: may be ~110 KB and a task may have thousands; the API's /tasks/{id}/attempts/ and the
#: console's attempt list have all of them.
SHOWN_ATTEMPTS = 20
#: Tasks one transaction of a bulk operator action (requeue, discard, cancel, run now) changes.
CHUNK = 1000
#: Earliest and latest time a caller may give (a task's run_at or the time its delay leads
#: to, a gate's until, a token's expiry, a worker's started_at). Well inside what Python,
#: PostgreSQL and the API's answers can show in UTC, whatever the offset it was given with.
EARLIEST_TIME = datetime(2000, 1, 1, tzinfo=UTC)
LATEST_TIME = datetime(9998, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
#: Why a time outside them is refused.
TIME_OUT_OF_RANGE = "Times must be from 2000-01-01 to 9998-12-31 (UTC)."


def in_utc(moment: datetime) -> datetime:
    """`moment` (with a time zone) in UTC; ValueError(TIME_OUT_OF_RANGE) unless it falls from
    EARLIEST_TIME to LATEST_TIME."""
    try:
        utc = moment.astimezone(UTC)
    except OverflowError:  # before year 1 or after 9999 in UTC
        raise ValueError(TIME_OUT_OF_RANGE) from None
    if not EARLIEST_TIME <= utc <= LATEST_TIME:
        raise ValueError(TIME_OUT_OF_RANGE)
    return utc


def text_errors(text: str) -> list[str]:
    """Why the database cannot store `text` (NUL characters, lone surrogates); [] if it can."""
    if not bad_text(text):
        return []
    problems = []
    if "\x00" in text:
        problems.append("Null characters are not allowed.")
    if surrogate := next((ch for ch in text if 0xD800 <= ord(ch) <= 0xDFFF), None):
        problems.append(f"Surrogate characters are not allowed: U+{ord(surrogate):X}.")
    return problems


def bad_text(text: str) -> bool:
    """True for text the database cannot store: NUL characters or lone surrogates."""
    if "\x00" in text:
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def idempotency_key_chars() -> int:
    """Longest idempotency key accepted."""
    return min(atf_settings.max_idempotency_key_length, IDEMPOTENCY_KEY_COLUMN_CHARS)


def _parent_count(call: Any) -> int:
    """Parents a batch item names: a request's `after`, or a JSON item's list of them."""
    after = call.get("after") if isinstance(call, Mapping) else getattr(call, "after", None)
    return len(after) if isinstance(after, list | tuple) else 0


def check_batch(calls: Sequence[Any]) -> None:
    """Raise InvalidTask when a batch has more tasks than ATF_MAX_BATCH_SIZE, or its tasks
    name more parents (`after`, a dependency row each) than ATF_MAX_BATCH_PARENTS in all.

    Checked before any item is: an oversize batch costs no validation of its items.
    """
    if len(calls) > atf_settings.max_batch_size:
        raise InvalidTask({"tasks": [
            f"At most {atf_settings.max_batch_size} tasks per batch; got {len(calls)}."]})
    parents = sum(map(_parent_count, calls))
    if parents > atf_settings.max_batch_parents:
        raise InvalidTask({"tasks": [
            f"At most {atf_settings.max_batch_parents} parents (after) per batch in all; "
            f"got {parents}."]})


def collection_name_error(name: Any) -> str | None:
    """Why `name` cannot name a collection, or None when it can (COLLECTION_NAME)."""
    if not isinstance(name, str) or not COLLECTION_NAME.fullmatch(name):
        return (f"Collection names are 1 to {COLLECTION_CHARS} characters: ASCII letters, digits "
                "and . _ : -, starting with a letter or digit.")
    return None
