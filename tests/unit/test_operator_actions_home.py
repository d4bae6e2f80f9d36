"""The API, the console and the management commands act for operators only through
`tasks_core.operations`: none of them reaches the store or scheduling's state changes."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FRONT_ENDS = [*sorted((ROOT / "tasks_api").rglob("*.py")),
              *sorted((ROOT / "tasks_console").rglob("*.py")),
              *sorted((ROOT / "tasks_core" / "management" / "commands").glob("atf_*.py"))]
#: Modules whose state changes belong behind the operations module.
FORBIDDEN_MODULES = {"store"}
#: scheduling's writers that an operator action must not call directly.
FORBIDDEN_CALLS = {("scheduling", "cancel"), ("scheduling", "set_gate"),
                   ("scheduling", "schedule"), ("scheduling", "schedule_many"),
                   ("periodic", "save_row")}


def _violations(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(
                "tasks_core"):
            # tasks_core.store and every module of it (tasks_core.store.worker, ...)
            names = {*node.module.split(".")[1:], *(alias.name for alias in node.names)}
            found += [f"imports {name}" for name in sorted(names & FORBIDDEN_MODULES)]
        elif isinstance(node, ast.Import):
            found += [f"imports {alias.name}" for alias in node.names
                      if FORBIDDEN_MODULES & set(alias.name.split(".")[1:])]
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
              and (node.value.id, node.attr) in FORBIDDEN_CALLS):
            found.append(f"uses {node.value.id}.{node.attr}")
    return found


@pytest.mark.parametrize("path", FRONT_ENDS, ids=lambda p: str(p.relative_to(ROOT)))
def test_front_ends_act_only_through_the_operations_module(path: Path) -> None:
    assert _violations(path) == []


def test_the_check_finds_a_direct_store_call(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from tasks_core import scheduling, store\n"
                   "from tasks_core.store.operators import requeue\n"
                   "import tasks_core.store.backends\n"
                   "store.requeue([1])\nscheduling.set_gate('a', 'open')\n")
    assert _violations(bad) == ["imports store", "imports store",
                                "imports tasks_core.store.backends", "uses scheduling.set_gate"]
