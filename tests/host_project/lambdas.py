"""The host project's lambdas: one that succeeds and one that fails for good."""

from __future__ import annotations

from typing import Any

from tasks_core import atf


@atf.register("host.greet", team="host")
def greet(ctx: atf.TaskContext, payload: Any) -> dict:
    return {"greeting": f"hello {payload['name']}"}


@atf.register("host.refuse", team="host")
def refuse(ctx: atf.TaskContext, payload: Any) -> dict:
    raise atf.Fatal("refused on purpose")
