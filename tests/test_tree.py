"""The tree: walks terminate on any input, labels, names, navigation."""

from __future__ import annotations

import random

import pytest

from journal import Session, UnknownEntry
from journal.tree import DUPLICATE, FORWARD, ORPHAN, SELF, Tree


def e(entry_id, parent, kind="message", ts="2026-01-01T00:00:00.000Z", **fields):
    base = {"type": kind, "id": entry_id, "parentId": parent, "timestamp": ts}
    if kind == "message":
        base["message"] = {"role": "user", "content": entry_id}
    base.update(fields)
    return base


def ids(tree, positions):
    return [tree.entries[i]["id"] for i in positions]


def test_linear_chain_and_leaf():
    t = Tree([e("a", None), e("b", "a"), e("c", "b")])
    assert t.leaf_id == "c"
    assert ids(t, t.path(t.leaf)) == ["a", "b", "c"]
    assert t.issues == []


def test_leaf_is_last_entry_in_file_order_even_on_another_branch():
    t = Tree([e("a", None), e("b", "a"), e("c", "a")])
    assert t.leaf_id == "c"
    assert ids(t, t.path(t.leaf)) == ["a", "c"]


def test_self_parent_becomes_root():
    t = Tree([e("a", None), e("b", "b")])
    t.finish_forward_check()
    assert ids(t, t.path(t.leaf)) == ["b"]
    assert [(i.kind, i.entry_id) for i in t.issues] == [(SELF, "b")]


def test_cycle_through_later_parent_terminates():
    # a -> b -> a: each names the other; a's parent only appears later.
    t = Tree([e("a", "b"), e("b", "a")])
    t.finish_forward_check()
    assert ids(t, t.path(t.leaf)) == ["a", "b"]
    assert [(i.kind, i.entry_id) for i in t.issues] == [(FORWARD, "a")]


def test_missing_parent_is_a_root_with_a_diagnostic():
    t = Tree([e("a", None), e("b", "zzz")])
    t.finish_forward_check()
    assert ids(t, t.path(t.leaf)) == ["b"]
    assert [(i.kind, i.entry_id) for i in t.issues] == [(ORPHAN, "b")]


def test_duplicate_id_pointing_back_into_its_own_chain_terminates():
    # pi loops forever here: the second "a" names "b" as parent, and "b" names "a".
    t = Tree([e("a", None), e("b", "a"), e("a", "b"), e("c", "a")])
    path = ids(t, t.path(t.leaf))
    assert path == ["a", "b", "a", "c"]
    assert [(i.kind, i.entry_id) for i in t.issues] == [(DUPLICATE, "a")]
    assert t.get("a") is t.entries[2], "a lookup by id finds the latest definition"


def test_duplicate_resolves_to_nearest_earlier_definition():
    t = Tree([e("x", None), e("y", "x"), e("x", None, ts="2"), e("z", "x")])
    assert ids(t, t.path(t.leaf)) == ["x", "z"]
    assert t.parent_index(3) == 2


def test_random_graphs_always_terminate():
    rng = random.Random(3)
    for _ in range(200):
        n = rng.randrange(1, 30)
        names = [f"{rng.randrange(8):08x}" for _ in range(n)]
        entries = [e(names[i], rng.choice(names + [None])) for i in range(n)]
        t = Tree(entries)
        for index in range(n):
            path = t.path(index)
            assert len(path) <= n and path == sorted(path)


def test_labels_latest_wins_and_empty_clears():
    t = Tree([
        e("a", None),
        e("l1", "a", "label", targetId="a", label="one"),
        e("l2", "l1", "label", targetId="a", label="two"),
    ])
    assert t.label("a") == "two"
    t.add(e("l3", "l2", "label", targetId="a"))
    assert t.label("a") is None


def test_name_is_latest_non_empty_session_info():
    t = Tree([e("a", None), e("n1", "a", "session_info", name=" First ")])
    assert t.name == "First"
    t.add(e("n2", "n1", "session_info", name="  "))
    assert t.name is None


def test_nested_orders_children_by_timestamp_and_attaches_labels():
    t = Tree([
        e("a", None),
        e("late", "a", ts="2026-01-01T00:00:09.000Z"),
        e("early", "a", ts="2026-01-01T00:00:01.000Z"),
        e("l", "early", "label", targetId="a", label="start"),
    ])
    (root,) = t.nested()
    assert root.label == "start"
    assert [c.entry["id"] for c in root.children] == ["early", "late"]


def test_session_navigation(tmp_path):
    with Session.create(tmp_path / "s.jsonl", cwd="/") as s:
        a = s.append_message({"role": "user", "content": "a"})
        b = s.append_message({"role": "assistant", "content": [], "provider": "p", "model": "m"})
        s.branch(a)
        c = s.append_message({"role": "user", "content": "c"})
        assert [x["id"] for x in s.get_branch()] == [a, c]
        assert [x["id"] for x in s.get_branch(b)] == [a, b]
        with pytest.raises(UnknownEntry):
            s.branch("nope0000")
        summary = s.branch_with_summary(b, "went elsewhere")
        assert s.get_entry(summary)["parentId"] == b
        assert s.get_entry(summary)["fromId"] == b
        s.reset_leaf()
        root2 = s.append_message({"role": "user", "content": "fresh"})
        assert s.get_entry(root2)["parentId"] is None
        with pytest.raises(UnknownEntry):
            s.append_label_change("nope0000", "x")
        s.append_label_change(a, "start")
        roots = s.get_tree()
        assert [r.entry["id"] for r in roots] == [a, root2]
        assert roots[0].label == "start"
