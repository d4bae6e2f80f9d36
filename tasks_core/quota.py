"""The lambdas' `quota` (tasks a second the consumers may enqueue), one bucket for the fleet.

Each lambda's token bucket lives in Redis (ATF's Redis: wake-ups and refused starts use it
too), refilled at `quota` tokens a second up to one second's worth, so N consumers together
enqueue at most the quota, not N times it. A consumer takes tokens before it enqueues and gives
back those it did not use, each one atomic script. While Redis cannot be reached a consumer
falls back to a bucket of its own (the quota per consumer, as before issue 34), and says so.
"""

from __future__ import annotations

import logging
import math

import redis

from tasks_core import wakeup
from tasks_core.conf import atf_settings

logger = logging.getLogger(__name__)

#: Refill, then take up to ARGV[3] whole tokens; answers the number taken. KEYS[1]: the bucket
#: (tokens, at); ARGV: rate a second, now in seconds, wanted.
_TAKE = """
local rate, now, wanted = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local tokens = tonumber(redis.call('HGET', KEYS[1], 'tokens') or ARGV[1])
local at = tonumber(redis.call('HGET', KEYS[1], 'at') or ARGV[2])
if now > at then tokens = math.min(rate, tokens + (now - at) * rate) else now = at end
local taken = math.max(0, math.min(wanted, math.floor(tokens)))
redis.call('HSET', KEYS[1], 'tokens', string.format('%.6f', tokens - taken),
           'at', string.format('%.6f', now))
redis.call('EXPIRE', KEYS[1], 3600)
return taken
"""
#: Give back ARGV[1] tokens (a consumer took more than it enqueued), at most to one second's
#: worth (ARGV[2]).
_GIVE_BACK = """
local tokens = tonumber(redis.call('HGET', KEYS[1], 'tokens'))
if tokens then
  redis.call('HSET', KEYS[1], 'tokens',
             string.format('%.6f', math.min(tonumber(ARGV[2]), tokens + tonumber(ARGV[1]))))
end
return 0
"""


def _key(lambda_id: int) -> str:
    return f"{atf_settings.queue_prefix}:quota:{lambda_id}"


class LocalBucket:
    """One consumer's own bucket: the fallback while Redis is away."""

    def __init__(self, rate: float, now_s: float) -> None:
        self.rate = rate
        self.tokens = rate
        self.updated_s = now_s

    def take(self, wanted: int, now_s: float) -> int:
        self.tokens = min(self.rate, self.tokens + (now_s - self.updated_s) * self.rate)
        self.updated_s = now_s
        taken = max(0, min(wanted, math.floor(self.tokens)))
        self.tokens -= taken
        return taken

    def give_back(self, count: int) -> None:
        self.tokens = min(self.rate, self.tokens + count)


class Quotas:
    """A consumer's view of every lambda's fleet-wide bucket."""

    def __init__(self) -> None:
        self._local: dict[int, LocalBucket] = {}
        self._took_locally: set[int] = set()  #: lambdas whose last take was from _local

    def take(self, lambda_id: int, rate: float, wanted: int, now_s: float) -> int:
        """Up to `wanted` tokens of the lambda's bucket, taken now."""
        try:
            taken = wakeup.client().eval(_TAKE, 1, _key(lambda_id), rate, now_s, wanted)
        except redis.RedisError as exc:
            logger.warning("quota of lambda %s kept by this consumer alone (Redis: %s)",
                           lambda_id, exc, extra={"action": "quota_local"})
            bucket = self._local.get(lambda_id)
            if bucket is None or bucket.rate != rate:
                bucket = self._local[lambda_id] = LocalBucket(rate, now_s)
            self._took_locally.add(lambda_id)
            return bucket.take(wanted, now_s)
        self._took_locally.discard(lambda_id)
        return int(taken)

    def give_back(self, lambda_id: int, rate: float, count: int) -> None:
        """Return tokens taken and not used."""
        if count <= 0:
            return
        if lambda_id in self._took_locally:
            self._local[lambda_id].give_back(count)
            return
        try:
            wakeup.client().eval(_GIVE_BACK, 1, _key(lambda_id), count, rate)
        except redis.RedisError as exc:
            logger.debug("quota tokens not given back: %s", exc)
