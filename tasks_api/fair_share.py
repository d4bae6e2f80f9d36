"""Fair shares of one server process: requests in progress, and claims waiting, per team and
per token, so one team cannot take the threads or the Redis connections the others need.

Each limit is a setting (`ATF_API_CONCURRENT_PER_TEAM`, ...; 0 lifts it) and counts within one
server process, whose threads and connection pools it protects. Over a limit the answer is
`429` naming the setting, with `Retry-After`, at once: nothing waits for a share.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from rest_framework.exceptions import Throttled
from rest_framework.request import Request

from tasks_api.models import ApiToken
from tasks_core import conf

logger = logging.getLogger(__name__)

#: Seconds a caller refused its share is told to wait (Retry-After).
RETRY_AFTER_S = 1


class ShareExceeded(Throttled):
    """429: the caller holds as much of the server process as one setting allows."""

    default_code = "share_exceeded"

    def __init__(self, what: str, setting: str, limit: int) -> None:
        super().__init__(wait=RETRY_AFTER_S, detail=(
            f"Too many {what} at once: {setting} allows {limit} per server process."))
        self.setting = setting


@dataclass(frozen=True)
class Share:
    """One counted key (a team's or a token's) and the setting that bounds it."""

    key: str
    setting: str

    @property
    def limit(self) -> int:
        return int(conf.value(self.setting))


class Shares:
    """Counts of what each key holds in this process, taken and given back together."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._lock = threading.Lock()
        self._held: Counter[str] = Counter()

    def take(self, shares: Sequence[Share], *, force: bool = False) -> None:
        """Count one more for every share, or none of them: ShareExceeded names the first
        that is full (unless `force`: taken back by a request already admitted)."""
        with self._lock:
            for share in shares:
                if not force and share.limit and self._held[share.key] >= share.limit:
                    logger.info("refused: %s for %s", self.what, share.key,
                                extra={"action": "share_exceeded", "setting": share.setting})
                    raise ShareExceeded(self.what, share.setting, share.limit)
            for share in shares:
                self._held[share.key] += 1

    def give_back(self, shares: Sequence[Share]) -> None:
        with self._lock:
            for share in shares:
                self._held[share.key] -= 1
                if self._held[share.key] <= 0:
                    del self._held[share.key]

    @contextmanager
    def held(self, shares: Sequence[Share]) -> Iterator[None]:
        self.take(shares)
        try:
            yield
        finally:
            self.give_back(shares)

    def holding(self, key: str) -> int:
        with self._lock:
            return self._held[key]


#: Requests in progress, per team and per token.
requests = Shares("requests in progress")
#: Claims waiting for a task, in all, per team and per token.
waiting_claims = Shares("waiting claims")


def caller_keys(request: Request) -> tuple[str, str]:
    """(team key, token key) of an authenticated caller: a token's own team (a full token
    filed under none, or a session: its user stands for both)."""
    if isinstance(request.auth, ApiToken):
        team = (f"team-{request.auth.team_id}" if request.auth.team_id is not None
                else f"user-{request.auth.user_id}")
        return team, f"token-{request.auth.pk}"
    user = f"user-{request.user.pk}"
    return user, user


def request_shares(request: Request) -> list[Share]:
    team, token = caller_keys(request)
    return [Share(f"team:{team}", "ATF_API_CONCURRENT_PER_TEAM"),
            Share(f"token:{token}", "ATF_API_CONCURRENT_PER_TOKEN")]


def waiting_claim_shares(request: Request) -> list[Share]:
    team, token = caller_keys(request)
    return [Share("all", "ATF_API_WAITING_CLAIMS"),
            Share(f"team:{team}", "ATF_API_WAITING_CLAIMS_PER_TEAM"),
            Share(f"token:{token}", "ATF_API_WAITING_CLAIMS_PER_TOKEN")]
