"""One owner for the compaction boundary: every reader of a branch keeps the same entries.

`journal.boundary` decides which compaction applies and which entries it keeps;
`build_context` (by leaf id), `resume`'s reverse scan, rotation and the agent's projection
all follow it. The property tests build random trees with forks and compactions and check
that all of them agree with each other and with pi's rule (written out here from pi's
`buildSessionContext`).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import journal
from agent.compaction.cutpoint import estimate_branch_context, estimate_session_context, projection
from agent.overflow import plan_truncation
from journal import (
    Boundary,
    Session,
    Tree,
    UnknownEntry,
    boundary,
    branch_context,
    build_context,
    load,
    resume,
)

T = "2026-01-01T00:00:00.000Z"


def message(entry_id: str, parent: str | None, role: str = "user",
            text: str = "") -> dict[str, Any]:
    body: dict[str, Any] = {"role": role, "content": text or entry_id, "timestamp": 1}
    if role == "assistant":
        body.update(content=[{"type": "text", "text": text or entry_id}], provider="p",
                    model=f"m-{entry_id}", stopReason="stop")
    return {"type": "message", "id": entry_id, "parentId": parent, "timestamp": T,
            "message": body}


def compaction(entry_id: str, parent: str | None, first_kept: str | None) -> dict[str, Any]:
    return {"type": "compaction", "id": entry_id, "parentId": parent, "timestamp": T,
            "summary": f"summary {entry_id}", "firstKeptEntryId": first_kept,
            "tokensBefore": 100}


def setting(kind: str, entry_id: str, parent: str | None) -> dict[str, Any]:
    if kind == "thinking_level_change":
        return {"type": kind, "id": entry_id, "parentId": parent, "timestamp": T,
                "thinkingLevel": f"level-{entry_id}"}
    return {"type": kind, "id": entry_id, "parentId": parent, "timestamp": T,
            "provider": "p", "modelId": f"m-{entry_id}"}


def write_session(path: Path, entries: list[dict[str, Any]]) -> None:
    header = {"type": "session", "version": 3, "id": "sess", "timestamp": T, "cwd": "/"}
    path.write_text("".join(json.dumps(e) + "\n" for e in [header, *entries]))


def pi_context(entries: list[dict[str, Any]], leaf_id: str) -> tuple[list[Any], Any, str]:
    """pi's buildSessionContext, step by step, on a tree with unique ids."""
    by_id = {e["id"]: e for e in entries}
    path = []
    current: dict[str, Any] | None = by_id[leaf_id]
    while current is not None:
        path.insert(0, current)
        parent = current.get("parentId")
        current = by_id.get(parent) if parent is not None else None
    thinking, model, latest = "off", None, None
    for entry in path:
        if entry["type"] == "thinking_level_change":
            thinking = entry["thinkingLevel"]
        elif entry["type"] == "model_change":
            model = {"provider": entry["provider"], "modelId": entry["modelId"]}
        elif entry["type"] == "message" and entry["message"]["role"] == "assistant":
            model = {"provider": entry["message"]["provider"],
                     "modelId": entry["message"]["model"]}
        elif entry["type"] == "compaction":
            latest = entry
    shown: list[Any] = []

    def append(entry: dict[str, Any]) -> None:
        if entry["type"] == "message":
            shown.append(entry["message"]["content"])

    if latest is None:
        for entry in path:
            append(entry)
    else:
        shown.append(latest["summary"])
        at = next(i for i, e in enumerate(path) if e["id"] == latest["id"])
        found = False
        for entry in path[:at]:
            found = found or entry["id"] == latest["firstKeptEntryId"]
            if found:
                append(entry)
        for entry in path[at + 1:]:
            append(entry)
    return shown, model, thinking


def shown(context: journal.Context) -> list[Any]:
    return [m.get("content", m.get("summary")) for m in context.messages]


@st.composite
def trees(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Entries in file order: messages, settings, compactions, and forks from earlier entries."""
    entries: list[dict[str, Any]] = []
    parents: dict[str, str | None] = {}
    leaf: str | None = None
    for n in range(draw(st.integers(1, 24))):
        entry_id = f"e{n}"
        op = draw(st.sampled_from(["user", "user", "assistant", "assistant", "compaction",
                                   "fork", "model_change", "thinking_level_change"]))
        if op == "fork" and entries:
            leaf = draw(st.sampled_from([None, *parents]))
            op = "user"
        if op == "compaction":
            on_path = []
            walk = leaf
            while walk is not None:
                on_path.append(walk)
                walk = parents[walk]
            first_kept = draw(st.sampled_from([*on_path, "elsewhere", None]))
            entry = compaction(entry_id, leaf, first_kept)
        elif op in ("model_change", "thinking_level_change"):
            entry = setting(op, entry_id, leaf)
        else:
            entry = message(entry_id, leaf, "assistant" if op == "assistant" else "user")
        entries.append(entry)
        parents[entry_id] = leaf
        leaf = entry_id
    return entries


@settings(max_examples=150, deadline=None)
@given(trees())
def test_every_leaf_projects_as_pi_does_and_by_id_as_by_branch(entries):
    tree = Tree(entries)
    for entry in entries:
        context = build_context(tree, entry["id"])
        branch = [tree.entries[i] for i in tree.path(tree.index_of(entry["id"]))]
        assert context == branch_context(branch)
        assert (shown(context), context.model, context.thinking_level) == pi_context(
            entries, entry["id"])
        at, kept = boundary(branch)
        assert context.compaction_id == (None if at is None else branch[at]["id"])
        assert context.fresh_from == (0 if at is None else 1 + sum(
            e["type"] == "message" for e in branch[kept:at]))


@settings(max_examples=150, deadline=None)
@given(trees())
def test_the_agent_projection_is_the_journal_projection(entries):
    tree = Tree(entries)
    context = build_context(tree, tree.leaf_id)
    messages, ids, live = projection([tree.entries[i] for i in tree.path(tree.leaf)])
    assert messages == context.messages
    assert live == context.fresh_from
    assert ids[1:] == context.entry_ids[1:]
    assert ids[:1] == ([context.compaction_id] if context.compaction_id else context.entry_ids[:1])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees())
def test_resume_rotation_and_the_session_estimate_agree_with_a_full_load(entries):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "s.jsonl"
        write_session(path, entries)
        full_tree = Tree(load(path).entries)
        full = build_context(full_tree, full_tree.leaf_id)
        snap = resume(path)
        tail = Tree(snap.entries, complete=snap.complete)
        assert build_context(tail, tail.leaf_id) == full
        with Session.open(path) as session:
            assert session.context(raw=True) == full
            estimate = estimate_session_context(session)
        branch = [full_tree.entries[i] for i in full_tree.path(full_tree.leaf)]
        assert estimate == estimate_branch_context(branch)
        if full.compaction_id is None:
            return
        with Session.open(path) as session:
            result = session.rotate()
            if not result.rotated:  # declined: the successor would be barely smaller
                assert "shorter" in result.reason
                return
            successor = Tree(load(session.path).entries)
            assert build_context(successor, successor.leaf_id).same_as(full)


def repeated_id_branch() -> list[dict[str, Any]]:
    """A branch that holds the compaction's kept id twice (a damaged file: pi would loop).

    The tree resolves `a` for the entries after the second `a` to that second one, so the
    path is a, b, a', settings, compaction.
    """
    return [
        message("a", None, text="one"),
        message("b", "a", text="two"),
        message("a", "b", text="three"),
        setting("thinking_level_change", "t", "a"),
        setting("model_change", "m", "t"),
        compaction("k", "m", "a"),
        message("c", "k", text="after"),
    ]


def test_resume_keeps_what_a_full_load_keeps_when_the_branch_repeats_the_kept_id(tmp_path):
    path = tmp_path / "s.jsonl"
    write_session(path, repeated_id_branch())
    full_tree = Tree(load(path).entries)
    snap = resume(path)
    assert not snap.complete, "the reverse scan stops at the kept entry"
    tail = Tree(snap.entries, complete=False)
    full = build_context(full_tree, full_tree.leaf_id)
    assert shown(full) == ["summary k", "three", "after"]
    assert build_context(tail, tail.leaf_id) == full


def test_the_agent_projection_keeps_what_build_context_keeps_on_a_repeated_id():
    tree = Tree(repeated_id_branch())
    branch = [tree.entries[i] for i in tree.path(tree.leaf)]
    assert boundary(branch) == Boundary(5, 2)
    assert projection(branch)[0] == build_context(tree, tree.leaf_id).messages


def test_build_context_takes_a_leaf_id():
    entries = [message("a", None), message("b", "a"), message("c", "a")]
    tree = Tree(entries)
    assert shown(build_context(tree, "b")) == ["a", "b"]
    assert shown(build_context(tree, "c")) == ["a", "c"]
    assert build_context(tree, None).messages == []
    with pytest.raises(UnknownEntry):
        build_context(tree, "nope")


def test_a_version_1_header_with_a_lone_surrogate_id_loads(tmp_path):
    path = tmp_path / "v1.jsonl"
    path.write_bytes(b'{"type":"session","id":"\\ud83d","timestamp":"' + T.encode()
                     + b'","cwd":"/"}\n{"type":"message","timestamp":"' + T.encode()
                     + b'","message":{"role":"user","content":"hi"}}\n')
    snap = load(path)
    assert [e["message"]["content"] for e in snap.entries] == ["hi"]
    assert load(path).entries[0]["id"] == snap.entries[0]["id"]


def test_session_and_view_project_the_same_leaf_by_id(tmp_path):
    path = tmp_path / "s.jsonl"
    write_session(path, [message("a", None), message("b", "a"), compaction("k", "b", "b"),
                         message("c", "k"), message("d", "b")])
    with Session.open(path) as session:
        by_session = session.context("c", raw=True)
    view = journal.View.open(path)
    assert view.context("c", raw=True) == by_session
    assert shown(by_session) == ["summary k", "b", "c"]


def test_overflow_recovery_only_truncates_results_the_context_shows():
    result = {"type": "message", "id": "r", "parentId": "b", "timestamp": T,
              "message": {"role": "toolResult", "toolCallId": "t1", "toolName": "bash",
                          "content": [{"type": "text", "text": "x" * 5000}], "isError": False,
                          "timestamp": 1}}
    entries = [message("a", None), message("b", "a", "assistant"), result,
               *repeated_id_branch()[2:]]
    entries[3] = message("a", "r", text="three")
    tree = Tree(entries)
    branch = [tree.entries[i] for i in tree.path(tree.leaf)]
    shown_ids = set(build_context(tree, tree.leaf_id).entry_ids)
    assert "r" not in shown_ids
    plan = plan_truncation(branch, 200_000, max_chars=100)
    assert all(branch[i]["id"] in shown_ids for i in plan)
    assert plan_truncation(branch[:3], 200_000, max_chars=100), "a shown result is cut"
