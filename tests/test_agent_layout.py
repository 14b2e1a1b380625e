"""The agent wing's layout: one owner for the `Message` alias, and inside `agent/models/` and
`agent/compaction/` every import points down (checked over the AST, so a lazy import counts)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
AGENT = ROOT / "agent"

# lower layers first: a module may import from its own package only what is in a lower layer
LAYERS = {
    "agent.models": [{"base", "errors"}, {"payload", "scripted"}, {"anthropic"}, {"__init__"}],
    "agent.compaction": [
        {"transcript"}, {"facts"}, {"summarize"}, {"cutpoint", "staged"}, {"compact"}, {"__init__"}
    ],
}


def defines(tree: ast.Module, name: str) -> bool:
    for node in tree.body:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return True
    return False


def imported_from(tree: ast.Module, name: str) -> set[str]:
    return {
        node.module or ""
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and any(a.name == name for a in node.names)
    }


def test_message_alias_has_one_owner() -> None:
    owners = []
    users: dict[str, set[str]] = {}
    for path in sorted(AGENT.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        relative = str(path.relative_to(ROOT))
        if defines(tree, "Message"):
            owners.append(relative)
        sources = imported_from(tree, "Message")
        if sources:
            users[relative] = sources
    assert owners == ["agent/messages.py"]
    assert users, "nothing imports Message"
    assert {s for sources in users.values() for s in sources} == {"agent.messages"}, users


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_imports_inside_the_package_point_down(package: str) -> None:
    layers = LAYERS[package]
    level = {name: i for i, names in enumerate(layers) for name in names}
    folder = ROOT / package.replace(".", "/")
    assert {p.stem for p in folder.glob("*.py")} == set(level), "a module has no layer"
    upward = []
    for path in sorted(folder.glob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                targets = [node.module]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            for target in targets:
                if target == package:
                    upward.append(f"{path.stem} imports the package {package}")
                elif target.startswith(package + "."):
                    child = target.removeprefix(package + ".").split(".")[0]
                    if level[child] >= level[path.stem]:
                        upward.append(f"{path.stem} imports {child}")
    assert upward == []
