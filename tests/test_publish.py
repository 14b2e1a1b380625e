"""One owner of atomic publication (journal.publish) and one of sealing (journal.seal)."""

from __future__ import annotations

import ast
import errno
import os
from pathlib import Path

import pytest

from journal import Session, load
from journal.errors import NoSpace
from journal.lineage import seal_file, seal_of
from journal.publish import link_as, publish_bytes
from journal.seal import SUCCESSOR_TYPE, is_seal, make_seal

JOURNAL = Path(__file__).resolve().parent.parent / "journal"
REAL_WRITE = os.write


def _uses(tree: ast.AST) -> set[str]:
    """The `os.<name>` calls and `os.O_<flag>` names a module uses."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id == "os"):
            found.add(node.attr)
    return found


def test_only_the_publish_module_creates_exclusive_temps_or_swaps_names() -> None:
    owners: dict[str, list[str]] = {}
    for path in sorted(JOURNAL.rglob("*.py")):
        used = _uses(ast.parse(path.read_text()))
        for name in used & {"O_EXCL", "replace", "link"}:
            owners.setdefault(name, []).append(path.name)
    assert owners == {"O_EXCL": ["publish.py"], "replace": ["publish.py"],
                      "link": ["publish.py"]}


def test_only_the_seal_module_names_the_successor_marker() -> None:
    holders = [p.name for p in sorted(JOURNAL.rglob("*.py"))
               if '"journal.successor"' in p.read_text()]
    assert holders == ["seal.py"]


def test_publish_replaces_a_planted_link_and_never_writes_through_it(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"theirs\n")
    final = tmp_path / "f.jsonl"
    final.symlink_to(outside)
    publish_bytes(str(final), b"ours\n", "test")
    assert not final.is_symlink() and final.read_bytes() == b"ours\n"
    assert outside.read_bytes() == b"theirs\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.jsonl", "outside.txt"]


def test_failed_publish_leaves_the_old_file_and_no_temp(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    final = tmp_path / "f.jsonl"
    final.write_bytes(b"old\n")

    def full(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, "no space")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(NoSpace):
        publish_bytes(str(final), b"new\n" * 100, "test")
    monkeypatch.setattr(os, "write", REAL_WRITE)
    assert final.read_bytes() == b"old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["f.jsonl"]


def test_link_as_makes_a_second_name_replacing_the_old_one(tmp_path: Path) -> None:
    src, alias = tmp_path / "a", tmp_path / "a.bak"
    src.write_bytes(b"x\n")
    alias.write_bytes(b"old\n")
    link_as(str(src), str(alias))
    assert os.path.samefile(src, alias)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "a.bak"]


def test_seal_is_the_last_entry_and_names_the_successor(tmp_path: Path) -> None:
    with Session.create(tmp_path) as s:
        s.append_message({"role": "user", "content": "hi", "timestamp": 0})
        path, leaf = s.path, s.leaf_id
    marker = seal_file(path, str(tmp_path / "next.jsonl"), "sid")
    assert is_seal(marker) and marker["parentId"] == leaf
    assert load(path).entries[-1] == marker
    assert seal_of(path) == {"successor": "next.jsonl", "file": "next.jsonl",
                             "sessionId": "sid"}
    made = make_seal({"ab"}, None, str(tmp_path / "x.jsonl"), "sid",
                     str(tmp_path / "archive" / "a.jsonl"))
    assert made["customType"] == SUCCESSOR_TYPE and made["data"]["fromArchive"] == (
        os.path.join("..", "x.jsonl"))


def test_a_temp_swept_between_its_create_and_its_flock_is_made_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`remove_stale_temps` (run by a pull, an export, a repair in another process) may find
    a temp in the instant after `NewFile` made it and before it took its flock, see it free
    and remove it: the writer notices and takes a fresh name instead of writing into a file
    that no name leads to any more (its publication then failed)."""
    import fcntl
    import types

    from journal import publish
    from journal.files import remove_stale_temps

    swept: list[str] = []

    def flock(fd: int, operation: int) -> None:
        if not swept:  # the first temp's: a sweeper comes first
            swept.extend(remove_stale_temps(str(tmp_path), suffix=".t.tmp"))
        fcntl.flock(fd, operation)

    monkeypatch.setattr(publish, "fcntl", types.SimpleNamespace(
        flock=flock, LOCK_EX=fcntl.LOCK_EX, LOCK_NB=fcntl.LOCK_NB))
    with publish.NewFile(str(tmp_path / "a.jsonl"), "t") as new:
        assert len(swept) == 1 and new.path != swept[0] and os.path.exists(new.path)
        new.write(b"data\n")
        new.publish()
    assert (tmp_path / "a.jsonl").read_bytes() == b"data\n"
    assert os.listdir(tmp_path) == ["a.jsonl"]
