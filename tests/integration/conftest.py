"""Fixtures of the API tests: two members of two teams."""

from __future__ import annotations

import pytest

from tests.integration.tasks_api.test_api_support import Member, member


@pytest.fixture
def alice() -> Member:
    """A member of team "alpha", which owns lambda "alpha.work"."""
    return member("alpha")


@pytest.fixture
def bob() -> Member:
    """A member of team "beta", which owns lambda "beta.work"."""
    return member("beta")
