"""Twenty identical POST /api/v1/groups/ at once, with keyed members: one task per key, one
group (with a group key) or one accepted group and clear refusals (without)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from rest_framework.test import APIClient

from tasks_core.models import TaskEntity, TaskGroup
from tests.conftest import race
from tests.integration.tasks_api.test_api_support import Member, member

pytestmark = [pytest.mark.django_db(transaction=True)]

#: Identical POSTs sent at once.
AT_ONCE = 20


def _post_at_once(who: Member, body: dict[str, Any]) -> list[Any]:
    """`body` POSTed AT_ONCE times at once, each from its own client and connection."""
    answers: list[Any] = []

    def post() -> None:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {who.token}")
        answers.append(client.post("/api/v1/groups/", body, format="json"))

    race(*[post] * AT_ONCE)
    return answers


def _keyed_members(who: Member) -> list[dict[str, Any]]:
    return [{"lambda": who.lam.name, "payload": {"n": n}, "idempotency_key": f"photo-{n}"}
            for n in range(5)]


def test_identical_keyed_groups_at_once_make_one_task_per_key() -> None:
    alice = member("keys")
    answers = _post_at_once(alice, {"tasks": _keyed_members(alice)})
    # One group got the keys' tasks; each other was refused with the group that has them
    codes = Counter(answer.status_code for answer in answers)
    assert codes == {201: 1, 400: AT_ONCE - 1}, codes
    refusal = next(answer.json() for answer in answers if answer.status_code == 400)
    assert "already a member of group" in refusal["tasks[0].idempotency_key"][0]
    assert TaskEntity.objects.count() == 5 and TaskGroup.objects.count() == 1


def test_identical_groups_with_a_group_key_at_once_are_one_group() -> None:
    alice = member("group-keys")
    answers = _post_at_once(alice, {"tasks": _keyed_members(alice), "then": {
        "lambda": alice.lam.name}, "idempotency_key": "album-9"})
    codes = Counter(answer.status_code for answer in answers)
    assert codes == {201: 1, 200: AT_ONCE - 1}, codes
    assert len({answer.json()["id"] for answer in answers}) == 1
    assert TaskEntity.objects.count() == 5 + 1 and TaskGroup.objects.count() == 1
