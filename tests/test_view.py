"""A read-only view follows what a writer appends, and reloads after a replacement."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from journal import NotASession, Session, View, load, repair, rotate
from journal.context import build_context
from journal.tree import Tree


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


# a view across rotations: followed on refresh, as a database session's view is
# (tests/test_pg_session.py), with real rotations by another process


ROOT = Path(__file__).resolve().parent.parent


def user(text: str) -> dict:
    return {"role": "user", "content": text, "timestamp": 1}


def compacted(path: str, n: int) -> str:
    """Append to the session `path` leads to a turn and a compaction keeping its last
    message, with enough before it for a rotation; return the live file."""
    with Session.open(path) as s:
        s.append_message(user(f"long {n} " + "x" * 3000))
        kept = s.append_message(user(f"kept {n}"))
        s.append_compaction(f"summary {n}", kept, 1000)
        return s.path


def rotate_in_a_process(path: str, *options: str) -> dict:
    """`journal rotate PATH OPTIONS --json` as its own process; its result."""
    done = subprocess.run([sys.executable, "-m", "journal.cli", "rotate", path, *options,
                           "--json"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["rotated"], result
    return result


def every_file(root: Path) -> dict[str, tuple[int, int]]:
    """Each file under `root`: (inode, size)."""
    found = {}
    for folder, _, names in os.walk(root):
        for name in names:
            st = os.stat(os.path.join(folder, name))
            found[os.path.join(folder, name)] = (st.st_ino, st.st_size)
    return found


@pytest.mark.parametrize("compress", [True, False])
@pytest.mark.parametrize("elsewhere", [False, True], ids=["archive-beside", "archive-elsewhere"])
@pytest.mark.parametrize("rotations", [1, 3])
def test_refresh_follows_rotations_to_the_live_file(tmp_path: Path, compress: bool,
                                                     elsewhere: bool, rotations: int) -> None:
    folder = tmp_path / "sessions"
    with Session.create(folder, cwd="/w") as s:
        first = s.path
    live = compacted(first, 0)
    view = View.open(first)
    options = [] if compress else ["--no-compress"]
    if elsewhere:
        options += ["--archive-dir", str(tmp_path / "elsewhere")]
    archives = []
    for n in range(rotations):  # all of them between two refreshes
        if n:
            compacted(live, n)
        result = rotate_in_a_process(live, *options)
        live, archives = result["successor"], [*archives, result["archive"]]
    assert all(a.endswith(".gz") == compress for a in archives)
    assert all(a.startswith(str(tmp_path / "elsewhere")) == elsewhere for a in archives)
    with Session.open(first) as s:  # the writer follows too, and appends in the live file
        assert s.path == live
        after = s.append_message(user("after the rotations"))
    before = every_file(tmp_path)

    entries = view.refresh()

    assert view.path == live
    assert [e.get("id") for e in entries] == [e.get("id") for e in load(live).entries]
    assert view.leaf_id == after
    tree = Tree(load(live).entries)
    assert view.context().messages == build_context(tree, tree.leaf_id).messages
    assert every_file(tmp_path) == before, "a view wrote (a lock file, say)"
    assert view.refresh() == []  # and goes on cheaply from there
    with Session.open(live) as s:
        more = s.append_message(user("more"))
    assert [e["id"] for e in view.refresh()] == [more]


def test_refresh_follows_a_rotation_whose_old_file_stayed_sealed_in_place(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The move into the archive failed: the old file stays where it was, sealed. A
    refresh takes in the seal and goes on in the successor."""
    import journal.rotation as rotation

    def refused(path: str, archive: str) -> None:
        raise PermissionError(13, "Permission denied", archive)

    with Session.create(tmp_path, cwd="/w") as s:
        path = s.path
    compacted(path, 0)
    view = View.open(path)
    monkeypatch.setattr(rotation, "move_into_archive", refused)
    result = rotate(path)
    assert result.rotated and result.archive is None and os.path.exists(path)
    entries = view.refresh()
    assert view.path == result.successor
    assert [e.get("id") for e in entries] == [
        e.get("id") for e in load(result.successor).entries]


def test_a_view_of_an_archive_goes_on_to_the_live_file_unless_told_not_to(
        tmp_path: Path) -> None:
    with Session.create(tmp_path, cwd="/w") as s:
        path = s.path
    compacted(path, 0)
    result = rotate_in_a_process(path, "--no-compress")
    archived = result["archive"]
    pinned = View.open(archived, follow=False)
    assert pinned.refresh() == [] and pinned.path == archived
    view = View.open(archived)
    entries = view.refresh()
    assert view.path == result["successor"]
    assert [e.get("id") for e in entries] == [
        e.get("id") for e in load(result["successor"]).entries]


def test_a_file_deleted_with_nothing_to_continue_it_still_raises(tmp_path: Path) -> None:
    with Session.create(tmp_path, cwd="/w") as s:
        s.append_message(user("one"))
        path = s.path
    view = View.open(path)
    os.unlink(path)
    with pytest.raises(NotASession, match="gone"):
        view.refresh()
    with Session.create(tmp_path / "b", cwd="/w") as s:
        other = s.path
    compacted(other, 0)
    pinned = View.open(other, follow=False)
    rotate_in_a_process(other)
    with pytest.raises(NotASession, match="gone"):
        pinned.refresh()  # follow=False: the file it was told to view is gone


def test_a_compressed_archive_is_read_once_and_again_only_when_replaced(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An archive never changes once written: refreshing its view reads nothing (counted at
    the one place a `.gz` is unpacked); a file put in its place is read again."""
    import journal.archivegz as archivegz

    with Session.create(tmp_path, cwd="/w") as s:
        path = s.path
    compacted(path, 0)
    archived = rotate_in_a_process(path)["archive"]
    assert archived.endswith(".gz")
    unpacked, opened = archivegz.unpacked, []

    def counted(raw, where):  # type: ignore[no-untyped-def]
        opened.append(where)
        return unpacked(raw, where)

    monkeypatch.setattr(archivegz, "unpacked", counted)
    view = View.open(archived, follow=False)
    assert len(opened) == 1
    for _ in range(5):
        assert view.refresh() == []
    assert len(opened) == 1, "the archive was unpacked again on refresh"
    copy = tmp_path / "copy.gz"
    copy.write_bytes(Path(archived).read_bytes())
    os.replace(copy, archived)  # replaced (same bytes, another file): read again
    assert [e.get("id") for e in view.refresh()] == [e.get("id") for e in load(archived).entries]
    assert len(opened) > 1
    before = len(opened)
    assert view.refresh() == [] and len(opened) == before


def test_a_sealed_file_whose_successor_is_not_here_is_not_looked_up_at_every_refresh(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The successor's absence is remembered with how the places it would appear in looked
    (a few stats): refreshes look it up again only once one of them changed."""
    import journal.view as view_module

    with Session.create(tmp_path, cwd="/w") as s:
        path = s.path
    compacted(path, 0)
    result = rotate_in_a_process(path, "--no-compress")
    successor = Path(result["successor"])
    aside = tmp_path.parent / f"{tmp_path.name}-aside.jsonl"
    os.replace(successor, aside)  # the successor is not here (yet)
    looked, resolve = [], view_module.resolve_live

    def counted(where):  # type: ignore[no-untyped-def]
        looked.append(where)
        return resolve(where)

    monkeypatch.setattr(view_module, "resolve_live", counted)
    view = View.open(result["archive"])
    for _ in range(5):
        assert view.refresh() == []
    assert len(looked) == 1, "the successor was looked up again at every refresh"
    assert view.path == result["archive"]
    os.replace(aside, successor)  # it arrives: the folder changed, so it is looked up
    entries = view.refresh()
    assert view.path == str(successor) and len(looked) == 2
    assert [e.get("id") for e in entries] == [e.get("id") for e in load(successor).entries]
