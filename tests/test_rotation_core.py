"""Rotation's core works for any holder of the writer lock, not only a Session."""

from __future__ import annotations

import os
from pathlib import Path

from test_rotate import build_session, context_of

from journal import load, resume
from journal.lineage import intent_path, seal_of
from journal.lock import WriterLock
from journal.model import Entry
from journal.rotation import RotationSource, finish_rotation, rotate_held
from journal.seal import is_seal, write_seal
from journal.tree import Tree


def test_core_rotates_a_locked_file_through_callables_and_returns_the_successor(
        tmp_path: Path) -> None:
    s, _ = build_session(tmp_path)
    path = s.path
    before = context_of(path)
    s.close()
    sealed: list[Entry] = []

    def seal(entry: Entry) -> None:
        sealed.append(entry)
        write_seal(path, entry)

    with WriterLock(path, 1):
        snap = resume(path)
        source = RotationSource(path, Tree(snap.entries, complete=snap.complete),
                                snap.header or {}, None, seal, keep_successor_lock=True)
        rotation = rotate_held(source, compress=False)
    successor = rotation.successor
    assert successor is not None and rotation.result.rotated
    assert successor.lock is not None and successor.lock.held
    successor.lock.release()
    assert successor.path == rotation.result.successor
    assert load(successor.path).entries == successor.entries
    assert successor.header["parentSession"].endswith(os.path.basename(path))
    assert len(sealed) == 1 and is_seal(sealed[0])
    assert not os.path.exists(path) and not os.path.exists(intent_path(path))
    archived = rotation.result.archive
    assert archived is not None and seal_of(archived) == sealed[0]["data"]
    assert context_of(successor.path).same_as(before)
    assert finish_rotation(rotation).rotated


def test_core_changes_nothing_when_there_is_nothing_to_rotate(tmp_path: Path) -> None:
    s, _ = build_session(tmp_path, compactions=0)
    path = s.path
    s.close()
    data = Path(path).read_bytes()

    def seal(entry: Entry) -> None:
        raise AssertionError("nothing to seal")

    with WriterLock(path, 1):
        snap = resume(path)
        rotation = rotate_held(RotationSource(path, Tree(snap.entries), snap.header or {},
                                              None, seal))
    assert rotation.successor is None and not rotation.result.rotated
    assert Path(path).read_bytes() == data


def test_a_rotation_declined_for_saving_too_little_says_how_little() -> None:
    """A successor some bytes shorter, but fewer than MIN_GAIN_BYTES, is declined saying so
    (the reason said that nothing lay before the kept entries, which was not so)."""
    from journal.rotation import MIN_GAIN_BYTES, too_little_gained

    assert too_little_gained(10_000, 10_000 + MIN_GAIN_BYTES) is None
    assert "no shorter" in str(too_little_gained(10_000, 9_000))
    reason = too_little_gained(10_000, 10_300)
    assert reason is not None and "only 300 bytes shorter" in reason
    assert f"must save {MIN_GAIN_BYTES:,} at least" in reason
