"""`Session` on a storage backend that is not a file (issue 12 part 4): created, appended to,
reopened from its tail, branched and compacted, with everything going through the
`journal.storage.Storage` seam. The backend is tests/memory_storage.py, which passes the
storage contract suite too.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from memory_storage import MemoryStorage

from journal import JournalError, LockTimeout, UnsupportedVersion
from journal.context import build_context
from journal.session import Session
from journal.snapshot import load, resume
from journal.storage import FileStorage
from journal.tree import Tree


def user(text: str) -> dict[str, object]:
    return {"role": "user", "content": text, "timestamp": 1}


def assistant(text: str) -> dict[str, object]:
    return {"role": "assistant", "content": [{"type": "text", "text": text}],
            "provider": "anthropic", "model": "m", "stopReason": "stop", "timestamp": 2}


def projected(storage: MemoryStorage, leaf: str | None = None) -> list[dict[str, object]]:
    """What a reader that loads the whole session projects (the reference)."""
    tree = Tree(load(storage).entries)
    return build_context(tree, leaf or tree.leaf_id).messages


def test_a_session_lives_in_a_storage_that_is_not_a_file(tmp_path: Path) -> None:
    locator = str(tmp_path / "a.mem")
    storage = MemoryStorage(locator)
    with Session.create(storage, cwd="/work") as session:
        assert session.path == locator
        first = session.append_message(user("one"))
        session.append_message(assistant("two"))
        session.append_model_change("anthropic", "m")
        for n in range(20):
            session.append_message(user(f"old {n}"))
            session.append_message(assistant(f"reply {n}"))
        kept = session.append_message(user("kept"))
        compaction = session.append_compaction("everything before 'kept'", kept, 1000)
        after = session.append_message(assistant("after the compaction"))
        created_context = session.context(raw=True).messages
    assert created_context == projected(storage)
    assert [m["role"] for m in created_context] == ["compactionSummary", "user", "assistant"]

    # reopened through another handle on the same store: resumed from the tail
    again = MemoryStorage(locator)
    assert resume(again).complete is False
    with Session.open(again) as session:
        assert not session.tree.complete  # only the tail was read
        assert session.leaf_id == after
        assert session.context(raw=True).messages == created_context
        # the writer lock is held: nobody else can open it for writing meanwhile
        with pytest.raises(LockTimeout):
            Session.open(MemoryStorage(locator), lock_timeout=0.2)
        # branch from an entry before the compaction (read on demand through the storage)
        session.branch(first)
        side = session.append_message(user("a side branch"))
        assert [m["content"] for m in session.context(raw=True).messages
                if m["role"] == "user"] == ["one", "a side branch"]
        assert session.get_entry(compaction) is not None
        session.append_session_info("memory session")
        assert session.name == "memory session"
        assert session.latest_session_info() is not None
    entries = load(again).entries
    ids = [e["id"] for e in entries]
    assert len(ids) == len(set(ids))  # no id reused, though the open read only the tail
    assert projected(again, side)[-1]["content"] == "a side branch"
    assert projected(again, after) == created_context
    # nothing of the session went to a file: only the lock's file is in the folder
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.mem.memlock"]


def test_a_new_session_in_a_taken_storage_is_refused(tmp_path: Path) -> None:
    storage = MemoryStorage(str(tmp_path / "b.mem"))
    Session.create(storage, cwd="/").close()
    before = storage.open_reader().stream.read()
    with pytest.raises(JournalError, match="already exists"):
        Session.create(storage, cwd="/")
    assert storage.open_reader().stream.read() == before


def test_another_backend_refuses_an_older_version_and_rotation(tmp_path: Path) -> None:
    legacy = MemoryStorage(str(tmp_path / "c.mem"))
    legacy.create(b'{"type":"session","id":"s","timestamp":"t","cwd":"/"}\n'
                  b'{"type":"message","timestamp":"t","message":{"role":"user","content":"x",'
                  b'"timestamp":1}}\n')
    with pytest.raises(UnsupportedVersion, match="--migrate"):
        Session.open(legacy)
    current = MemoryStorage(str(tmp_path / "d.mem"))
    with Session.create(current, cwd="/") as session:
        session.append_message(user("x"))
        with pytest.raises(JournalError, match="session files only"):
            session.rotate()


def test_a_file_storage_opens_as_its_path_does(tmp_path: Path) -> None:
    path = tmp_path / "f.jsonl"
    with Session.create(FileStorage(str(path)), cwd="/") as session:
        first = session.append_message(user("x"))
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    link = tmp_path / "link.jsonl"
    link.symlink_to(path)
    with Session.open(FileStorage(str(link))) as session:  # resolved as a path is
        assert session.path == str(path.resolve()) and session.leaf_id == first
