"""Fair shares of one server process: counted per key, all or nothing, 429 naming the limit."""

from __future__ import annotations

from typing import Any

import pytest

from tasks_api.fair_share import Share, ShareExceeded, Shares

TEAM = Share("team:a", "ATF_API_CONCURRENT_PER_TEAM")
TOKEN = Share("token:1", "ATF_API_CONCURRENT_PER_TOKEN")
OTHER_TOKEN = Share("token:2", "ATF_API_CONCURRENT_PER_TOKEN")


def test_a_team_holds_its_share_and_no_more_whichever_token_asks(settings: Any) -> None:
    # Given a team share of 3 and a token share of 2
    settings.ATF_API_CONCURRENT_PER_TEAM, settings.ATF_API_CONCURRENT_PER_TOKEN = 3, 2
    shares = Shares("requests in progress")
    shares.take([TEAM, TOKEN])
    shares.take([TEAM, TOKEN])
    # Then the token's third is refused, naming the token's setting, and counts nothing
    with pytest.raises(ShareExceeded) as refused:
        shares.take([TEAM, TOKEN])
    assert (refused.value.status_code, refused.value.wait) == (429, 1)
    assert str(refused.value.detail).startswith(
        "Too many requests in progress at once: ATF_API_CONCURRENT_PER_TOKEN allows 2 per "
        "server process.")
    assert shares.holding("team:a") == 2
    # And another token of the team gets one more, then the team's setting refuses
    shares.take([TEAM, OTHER_TOKEN])
    with pytest.raises(ShareExceeded, match="ATF_API_CONCURRENT_PER_TEAM allows 3"):
        shares.take([TEAM, OTHER_TOKEN])
    # And a share given back can be taken again
    shares.give_back([TEAM, TOKEN])
    with shares.held([TEAM, TOKEN]):
        assert shares.holding("team:a") == 3
    assert (shares.holding("team:a"), shares.holding("token:1")) == (2, 1)


def test_zero_lifts_a_limit(settings: Any) -> None:
    settings.ATF_API_CONCURRENT_PER_TEAM = 0
    shares = Shares("requests in progress")
    for _ in range(1000):
        shares.take([TEAM])
    assert shares.holding("team:a") == 1000
