"""A read-only view follows what a writer appends, and reloads after a replacement."""

from __future__ import annotations

import os

from journal import Session, View, repair


def test_refresh_takes_in_new_entries_but_never_a_half_line(tmp_path):
    with Session.create(tmp_path / "s.jsonl", cwd="/") as s:
        a = s.append_message({"role": "user", "content": "one"})
        view = View.open(s.path)
        assert view.leaf_id == a and view.refresh() == []
        b = s.append_message({"role": "user", "content": "two"})
        assert [e["id"] for e in view.refresh()] == [b]
        with open(s.path, "ab") as f:
            f.write(b'{"type":"message","id":"half')
        assert view.refresh() == []
        assert view.leaf_id == b
        assert [m["content"] for m in view.context().messages] == ["one", "two"]
        path = s.path
    with open(path, "rb+") as f:
        f.truncate(os.path.getsize(path) - len(b'{"type":"message","id":"half'))
    with Session.open(path) as s:
        c = s.append_message({"role": "user", "content": "three"})
    assert [e["id"] for e in view.refresh()] == [c]
    assert not view.diagnostics


def test_refresh_after_repair_replaced_the_file(tmp_path):
    with Session.create(tmp_path / "s.jsonl", cwd="/") as s:
        s.append_message({"role": "user", "content": "go"})
        s.append_message({"role": "assistant", "provider": "p", "model": "m", "stopReason":
                          "toolUse", "content": [{"type": "toolCall", "id": "c1", "name": "ls",
                                                  "arguments": {}}]})
        path = s.path
    view = View.open(path)
    assert len(view.context(raw=True).messages) == 2
    assert repair(path, strict=True).changed
    entries = view.refresh()
    assert len(entries) == 3, "a replaced file is reloaded whole"
    assert [m["role"] for m in view.context(raw=True).messages] == [
        "user", "assistant", "toolResult"]
