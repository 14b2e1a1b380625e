"""The import graph of `journal/`, `agent/` and `tools/` has no cycle and no private reach-ins.

The graph is read from the source (AST), so it sees every import: module level, inside
functions and under `TYPE_CHECKING`. A cycle through any of them is a design cycle even when
Python would tolerate it at run time.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("journal", "agent", "tools")


def module_files() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def is_package(name: str, modules: dict[str, Path]) -> bool:
    return modules[name].name == "__init__.py"


def absolute(module: str, level: int, target: str | None, modules: dict[str, Path]) -> str:
    """The absolute name of `from <level dots><target> import ...` written in `module`."""
    if level == 0:
        return target or ""
    base = module.split(".")
    if not is_package(module, modules):
        base.pop()
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def imports_of(module: str, tree: ast.AST, modules: dict[str, Path]) -> Iterator[tuple[str, int]]:
    """(imported module of ours, line) for every import in `tree`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            source = absolute(module, node.level, node.module, modules)
            if source not in modules:
                continue
            for alias in node.names:
                child = f"{source}.{alias.name}"
                yield (child if child in modules else source), node.lineno


def graph() -> dict[str, set[str]]:
    modules = module_files()
    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        edges[name] = {target for target, _ in imports_of(name, tree, modules) if target != name}
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def external_names(tree: ast.AST, modules: dict[str, Path]) -> set[str]:
    """Names bound by `import x` of a module that is not ours (their privates are their risk)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] not in PACKAGES:
                    names.add(alias.asname or alias.name.split(".")[0])
    return names


def private_reach_ins() -> list[str]:
    """`from m import _x`, `m._x` and `obj._x` (obj not self/cls) across our modules."""
    modules = module_files()
    found: list[str] = []
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        where = path.relative_to(ROOT)
        allowed = {"self", "cls"} | external_names(tree, modules)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                source = absolute(name, node.level, node.module, modules)
                if source not in modules:
                    continue
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        found.append(f"{where}:{node.lineno}: from {source} import {alias.name}")
            elif isinstance(node, ast.Attribute):
                attr = node.attr
                if not attr.startswith("_") or attr.startswith("__"):
                    continue
                owner = node.value
                if isinstance(owner, ast.Name) and owner.id in allowed:
                    continue
                found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_checker_sees_a_cycle_and_a_reach_in(tmp_path: Path) -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(edges) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    modules = {"journal": ROOT / "journal" / "__init__.py",
               "journal.tail": ROOT / "journal" / "tail" / "__init__.py",
               "journal.tail.source": ROOT / "journal" / "tail" / "source.py"}
    tree = ast.parse("from . import source\nfrom journal.tail import follow\nimport journal\n")
    assert sorted(imports_of("journal.tail", tree, modules)) == [
        ("journal", 3), ("journal.tail", 2), ("journal.tail.source", 1)]


@pytest.mark.parametrize("package", PACKAGES)
def test_every_package_is_seen(package: str) -> None:
    assert package in module_files()


def test_no_import_cycle() -> None:
    assert cycles(graph()) == []


def test_journal_imports_nothing_from_the_other_wings() -> None:
    edges = graph()
    wrong = sorted(f"{m} -> {t}" for m, ts in edges.items() if m.split(".")[0] == "journal"
                   for t in ts if t.split(".")[0] != "journal")
    assert wrong == []


def test_tools_know_nothing_of_journal_or_agent() -> None:
    edges = graph()
    wrong = sorted(f"{m} -> {t}" for m, ts in edges.items() if m.split(".")[0] == "tools"
                   for t in ts if t.split(".")[0] != "tools")
    assert wrong == []


def test_no_module_uses_another_modules_private_names() -> None:
    assert private_reach_ins() == []
