"""Fault injection on the commit path: short writes, ENOSPC, EIO from the sync, a full disk.

`journal.log` calls `os.write` and `os.fdatasync` through the global `os` module, so the fakes
below replace those functions for the whole process but only misbehave for descriptors that
refer to the session file under test (matched by device and inode), and only on the chosen
call. Every other descriptor (pytest's own output, the lock file) gets the real function.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import journal.log
from journal import Durability, JournalError, Session, WriteFailed, load

REAL_WRITE = os.write
REAL_FDATASYNC = os.fdatasync


def msg(text: str, size: int = 200) -> dict:
    return {"role": "user", "content": text + "." * size, "timestamp": 0}


def contents(path: str) -> list[str]:
    return [e["message"]["content"].rstrip(".") for e in load(path).entries]


def assert_clean(path: str, expected: list[str]) -> None:
    """The file parses with no diagnostics and holds exactly `expected`, as one chain."""
    snap = load(path)
    assert snap.diagnostics == [], [d.describe() for d in snap.diagnostics]
    assert snap.end == snap.size == os.path.getsize(path)
    assert [e["message"]["content"].rstrip(".") for e in snap.entries] == expected
    for i, entry in enumerate(snap.entries):
        assert entry["parentId"] == (snap.entries[i - 1]["id"] if i else None)


class Fault:
    """Counts calls made on the session file's descriptors; misbehaves on call number `at`."""

    def __init__(self, path: str, at: int, action: Callable[..., int | None]) -> None:
        st = os.stat(path)
        self.key = (st.st_dev, st.st_ino)
        self.at = at
        self.action = action
        self.calls = 0
        self.fired = 0

    def targets(self, fd: int) -> bool:
        try:
            st = os.fstat(fd)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == self.key

    def hit(self, fd: int) -> bool:
        if not self.targets(fd):
            return False
        self.calls += 1
        if self.calls == self.at:
            self.fired += 1
            return True
        return False


@pytest.fixture
def session(tmp_path: Path) -> Iterator[Session]:
    s = Session.create(tmp_path / "s.jsonl", cwd=str(tmp_path), durability=Durability.always())
    try:
        yield s
    finally:
        s.close()


def inject_write(monkeypatch: pytest.MonkeyPatch, fault: Fault) -> None:
    def write(fd: int, data: bytes) -> int:
        if fault.hit(fd):
            result = fault.action(fd, data)
            assert result is not None
            return result
        return REAL_WRITE(fd, data)

    assert journal.log.os is os  # the module patched below is the one journal.log calls
    monkeypatch.setattr(os, "write", write)


def inject_fdatasync(monkeypatch: pytest.MonkeyPatch, fault: Fault) -> None:
    def fdatasync(fd: int) -> None:
        if fault.hit(fd):
            fault.action(fd)
        REAL_FDATASYNC(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)


def short_write(fd: int, data: bytes) -> int:
    """What a filling disk does: the kernel takes part of the buffer and says how much."""
    return REAL_WRITE(fd, bytes(data)[: len(data) // 3])


def enospc(fd: int, data: bytes) -> int:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def partial_then_eio(fd: int, data: bytes) -> int:
    """Bytes reach the file, then the call fails anyway (as on some network filesystems)."""
    REAL_WRITE(fd, bytes(data)[: len(data) // 2])
    raise OSError(errno.EIO, os.strerror(errno.EIO))


def sync_eio(fd: int) -> None:
    raise OSError(errno.EIO, os.strerror(errno.EIO))


@pytest.mark.parametrize(
    ("action", "words"),
    [
        (short_write, ["short write", "disk full"]),
        (enospc, ["ENOSPC", "No space left on device"]),
        (partial_then_eio, ["EIO", "Input/output error"]),
    ],
    ids=["short-write", "enospc", "partial-then-eio"],
)
def test_failed_write_is_rolled_back(
    session: Session, monkeypatch: pytest.MonkeyPatch, action: Callable, words: list[str]
) -> None:
    committed = [f"m{i}" for i in range(3)]
    for text in committed:
        session.append_message(msg(text))
    size_before = os.path.getsize(session.path)

    fault = Fault(session.path, at=3, action=action)
    inject_write(monkeypatch, fault)
    session.append_message(msg("m3", 5000))
    session.append_message(msg("m4", 5000))
    committed += ["m3", "m4"]
    good_size = os.path.getsize(session.path)
    assert good_size > size_before
    with pytest.raises(WriteFailed) as info:
        session.append_message(msg("lost", 5000))
    assert fault.fired == 1
    err = info.value
    assert err.offset == good_size
    text = str(err)
    assert session.path in text and f"{good_size:,}" in text and "rolled back" in text
    for word in words:
        assert word in text, f"{word!r} not in {text!r}"
    assert os.path.getsize(session.path) == good_size
    assert_clean(session.path, committed)

    # The fault is gone: the same session keeps going, chained to the last committed entry.
    monkeypatch.undo()
    session.append_message(msg("m5"))
    committed.append("m5")
    assert_clean(session.path, committed)
    assert session.leaf_id == load(session.path).entries[-1]["id"]


def test_failed_sync_is_rolled_back(session: Session, monkeypatch: pytest.MonkeyPatch) -> None:
    committed = ["a", "b"]
    for text in committed:
        session.append_message(msg(text))
    fault = Fault(session.path, at=2, action=sync_eio)
    inject_fdatasync(monkeypatch, fault)
    session.append_message(msg("c"))
    committed.append("c")
    good_size = os.path.getsize(session.path)
    with pytest.raises(WriteFailed) as info:
        session.append_message(msg("unsynced"))
    assert fault.fired == 1
    text = str(info.value)
    assert "sync failed" in text and "EIO" in text and "rolled back" in text
    assert os.path.getsize(session.path) == good_size
    assert_clean(session.path, committed)

    monkeypatch.undo()
    session.append_message(msg("d"))
    committed.append("d")
    assert_clean(session.path, committed)


@pytest.mark.parametrize("action", [short_write, enospc, sync_eio], ids=lambda a: a.__name__)
def test_failed_append_many_leaves_none_of_its_entries(
    session: Session, monkeypatch: pytest.MonkeyPatch, action: Callable
) -> None:
    session.append_many([{"type": "message", "message": msg(t)} for t in ("a", "b")])
    fault = Fault(session.path, at=1, action=action)
    if action is sync_eio:
        inject_fdatasync(monkeypatch, fault)
    else:
        inject_write(monkeypatch, fault)
    batch = [{"type": "message", "message": msg(f"x{i}", 3000)} for i in range(6)]
    with pytest.raises(WriteFailed):
        session.append_many(batch)
    assert fault.fired == 1
    assert_clean(session.path, ["a", "b"])
    monkeypatch.undo()
    ids = session.append_many([{"type": "message", "message": msg(t)} for t in ("c", "d")])
    assert_clean(session.path, ["a", "b", "c", "d"])
    assert [e["id"] for e in load(session.path).entries[2:]] == ids


def test_no_leftover_after_a_failed_commit_and_reopen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed commit leaves nothing that a later writer (a new open) would trip over."""
    with Session.create(tmp_path / "r.jsonl", cwd=str(tmp_path)) as s:
        path = s.path
        s.append_message(msg("kept"))
        fault = Fault(path, at=1, action=short_write)
        inject_write(monkeypatch, fault)
        with pytest.raises(WriteFailed):
            s.append_message(msg("torn", 20_000))
        monkeypatch.undo()
    with Session.open(path) as s:
        assert s.recovered == []
        s.append_message(msg("next"))
    assert_clean(path, ["kept", "next"])
    assert not os.path.exists(path + ".quarantine")


def test_rollback_failure_never_costs_a_later_acknowledged_entry(
    session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    session.append_message(msg("a"))
    fault = Fault(session.path, at=1, action=short_write)
    inject_write(monkeypatch, fault)
    real_ftruncate = os.ftruncate

    def ftruncate(fd: int, length: int) -> None:
        if fault.targets(fd):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        real_ftruncate(fd, length)

    monkeypatch.setattr(os, "ftruncate", ftruncate)
    with pytest.raises(WriteFailed):
        session.append_message(msg("torn", 9000))
    with pytest.raises(WriteFailed, match="refusing to append"):
        session.append_message(msg("while the file still cannot be cut back"))
    monkeypatch.undo()
    # Either the session refuses to go on, or what it acknowledges must be readable.
    try:
        new_id = session.append_message(msg("b"))
    except JournalError:
        return
    assert new_id in [e["id"] for e in load(session.path).entries]


def test_short_write_of_the_header_fails_create(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "new.jsonl"

    def write(fd: int, data: bytes) -> int:
        if bytes(data[:17]) == b'{"type":"session"':
            return short_write(fd, data)
        return REAL_WRITE(fd, data)

    monkeypatch.setattr(os, "write", write)
    try:
        s = Session.create(target, cwd=str(tmp_path))
    except (JournalError, OSError):
        # Refusing is right; then no half-written file may be left behind.
        assert not target.exists() or load(target).diagnostics == []
        return
    monkeypatch.undo()
    with s:
        s.append_message(msg("first"))
    assert_clean(str(target), ["first"])


# A real full disk (root only): a small tmpfs, filled by a file we can delete afterwards.


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    if shutil.which("mount") is None or shutil.which("umount") is None:
        pytest.skip("no mount/umount command")
    mnt = tmp_path / "full"
    mnt.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False, capture_output=True)


def test_real_full_disk(small_tmpfs: Path) -> None:
    # Reserve most of the space in a filler file first, so that freeing it later is possible.
    filler = small_tmpfs / "filler"
    with open(filler, "wb") as f:
        f.write(b"\0" * (160 * 1024))
    acked: list[str] = []
    failures: list[WriteFailed] = []
    with Session.create(small_tmpfs / "s.jsonl", cwd=str(small_tmpfs)) as s:
        path = s.path
        for i in range(10_000):
            try:
                # Sizes that do not divide a page, so some commit straddles the last free page.
                s.append_message(msg(f"e{i}", 1500 + 37 * (i % 50)))
            except WriteFailed as e:
                failures.append(e)
                break
            acked.append(f"e{i}")
        assert failures, "the tmpfs never filled up"
        err = failures[0]
        print(f"\nfull tmpfs after {len(acked)} commits: {err.reason}")
        assert "rolled back" in str(err)
        assert "short write" in str(err) or "ENOSPC" in str(err), str(err)
        assert_clean(path, acked)
        assert len(acked) > 5

        # Still full: another attempt fails the same clean way and changes nothing.
        with pytest.raises(WriteFailed):
            s.append_message(msg("again", 8000))
        assert_clean(path, acked)

        filler.unlink()
        s.append_message(msg("after"))
        acked.append("after")
        s.append_many([{"type": "message", "message": msg(t, 4000)} for t in ("x", "y")])
        acked += ["x", "y"]
    assert_clean(path, acked)
    with Session.open(path) as s:
        assert s.recovered == []
