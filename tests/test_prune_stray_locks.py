"""Removing a lock file left beside a session file that is gone (`journal.lock.
remove_stray_lock`, what `journal prune` uses) races safely with writers taking the lock
(format.md § 9.1): a locker that opened it before it went starts again on a fresh one."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from journal.errors import LockTimeout
from journal.lock import WriterLock, remove_stray_lock

ROOT = Path(__file__).resolve().parents[1]


def env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}


# removal races with writers (format.md § 9.1)


def test_a_locker_that_opened_the_lock_file_before_prune_removed_it_starts_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What removing relies on: a locker that opened the stray lock file, then got its kernel
    lock only once prune had removed it, holds a file no name leads to; it must see that and
    start again on a fresh file, or a second writer would lock that one and both would
    write."""
    import journal.lock as lock_module

    session = str(tmp_path / "s.jsonl")
    Path(session + ".lock").write_text(
        '{"pid": 1, "host": "h", "since": "2026-01-01T00:00:00.000Z"}')  # nobody holds it
    opened = lock_module._open_lock_file
    removals: list[str | None] = []

    def open_then_prune_runs(path: str, create: bool) -> int:
        fd = opened(path, create)
        if not removals:  # prune gets in between this locker's open and its flock
            removals.append(remove_stray_lock(path))
        return fd

    monkeypatch.setattr(lock_module, "_open_lock_file", open_then_prune_runs)
    with WriterLock(session, timeout=1):
        assert removals == [None]
        assert os.path.isfile(session + ".lock")  # the fresh file it started again on
        with pytest.raises(LockTimeout):
            WriterLock(session, timeout=0).acquire()
    assert not os.path.lexists(session + ".lock")

RACER = r"""
import os, random, signal, sys, time
from journal.lock import WriterLock
session, inside, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
end = time.monotonic() + seconds
while time.monotonic() < end:
    with WriterLock(session, timeout=30):
        if random.random() < 0.2:  # dies holding it: a stray lock file for the others
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            fd = os.open(inside, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            print("clash", flush=True)  # someone else believes it holds the lock too
        else:
            os.close(fd)
            os.unlink(inside)
"""


def test_removing_stray_locks_while_writers_take_them_never_lets_two_hold_it(
        tmp_path: Path) -> None:
    """Writers of a name with no session file (as `Session.create` before its file exists)
    take the lock while prune's removal runs again and again: some die holding it, leaving a
    stray lock file both the others and the removal go for. Never do two writers hold it."""
    session = str(tmp_path / "s.jsonl")
    inside = str(tmp_path / "inside")
    seconds = 3.0
    end = time.monotonic() + seconds

    def start() -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "-c", RACER, session, inside,
                                 str(max(0.1, end - time.monotonic()))],
                                stdout=subprocess.PIPE, text=True, env=env(tmp_path))

    running = [start() for _ in range(3)]
    finished: list[subprocess.Popen[str]] = []
    removed = kept = 0
    while time.monotonic() < end:
        for i, child in enumerate(running):
            if child.poll() is not None:
                finished.append(child)
                running[i] = start()
        if remove_stray_lock(session + ".lock") is None:
            removed += 1
        else:
            kept += 1
        time.sleep(random.random() * 0.0005)
    finished += running
    outputs = [child.communicate(timeout=60)[0] for child in finished]
    assert sum(out.count("clash") for out in outputs) == 0, "two writers held the lock at once"
    killed = sum(1 for child in finished if child.returncode == -signal.SIGKILL)
    assert killed > 0 and removed > 0 and kept > 0, (killed, removed, kept)
