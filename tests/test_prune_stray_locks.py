"""`journal prune` removes a lock file left beside a session file that is gone (a rotation
killed after it archived the old file, before it let go of the lock), and only such a file:
never one a live process holds, one whose session file exists, another program's `.lock`, a
link or FIFO; a dry run touches nothing; `--json` says what happened to each one; `ls` never
lists one. Removing races safely with writers taking the lock (format.md § 9.1)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from test_rotate_crash import crash_by_sigkill, make_session

from journal.errors import LockTimeout
from journal.lineage import ARCHIVE_DIR, resolve_live
from journal.lock import WriterLock, remove_stray_lock
from journal.stray_locks import PENDING_INTENT

ROOT = Path(__file__).resolve().parents[1]
LOCK_KEYS = {"path", "action", "reason", "done", "error"}


def env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}


def journal(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "journal.cli", *argv], capture_output=True,
                          text=True, env=env(tmp_path), timeout=120)


def everything(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and not p.is_symlink()}


def prune_json(tmp_path: Path, folder: Path, *flags: str) -> dict:
    done = journal(tmp_path, "prune", str(folder), "--older-than", "90d", "--json", *flags)
    assert done.returncode == 0, done.stdout + done.stderr
    return orjson.loads(done.stdout)


def rotation_killed_before_letting_go(folder: Path) -> str:
    """A session rotated by a process SIGKILLed after the rotation's last step (the old file
    archived, its intent removed), before it let go of the writer lock: the old file's path,
    whose `.lock` is left beside the name the file had."""
    folder.mkdir(parents=True, exist_ok=True)
    old = make_session(folder)
    crash_by_sigkill(old, "done")
    assert not os.path.lexists(old), "the old file was archived"
    assert os.path.isfile(os.path.join(folder, ARCHIVE_DIR, os.path.basename(old)))
    assert os.path.isfile(old + ".lock"), "the killed rotation left its lock file"
    assert resolve_live(old)[0] != old
    return old


def test_prune_removes_the_lock_file_a_rotation_killed_before_letting_go_left(
        tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    old = rotation_killed_before_letting_go(sessions)
    live = resolve_live(old)[0]

    listed = orjson.loads(journal(tmp_path, "ls", str(sessions), "--json", "--no-cache").stdout)
    assert [row["path"] for row in listed] == [live]  # ls never takes it for a session
    assert not any(f.endswith(".lock") for row in listed for f in row["files"])
    assert listed[0]["state"] == "live" and listed[0]["problems"] == []

    before = everything(sessions)
    report = prune_json(tmp_path, sessions)  # the session itself is recent: kept
    assert [(i["path"], i["action"]) for i in report["items"]] == [(live, "skip")]
    assert report["locks"] == [{"path": old + ".lock", "action": "remove", "reason": None,
                                "done": True, "error": None}]
    assert not os.path.lexists(old + ".lock")
    after = everything(sessions)
    assert after == {k: v for k, v in before.items() if k != os.path.basename(old) + ".lock"}

    again = prune_json(tmp_path, sessions)  # nothing left to do
    assert again["locks"] == []
    with WriterLock(live, timeout=0):  # the session is as writable as before
        pass


def test_a_dry_run_says_it_would_remove_the_lock_and_touches_nothing(tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    old = rotation_killed_before_letting_go(sessions)
    before = everything(sessions)

    report = prune_json(tmp_path, sessions, "--dry-run")
    assert report["dryRun"] is True
    assert report["locks"] == [{"path": old + ".lock", "action": "remove", "reason": None,
                                "done": False, "error": None}]
    text = journal(tmp_path, "prune", str(sessions), "--older-than", "90d", "--dry-run")
    assert text.returncode == 0, text.stderr
    assert f"would remove {old}.lock (a lock file nobody holds" in text.stdout
    assert "1 stray lock file(s) would be removed" in text.stdout
    assert everything(sessions) == before

    done = journal(tmp_path, "prune", str(sessions), "--older-than", "90d")
    assert done.returncode == 0, done.stderr
    assert f"removed   {old}.lock (a lock file nobody holds" in done.stdout
    assert "1 stray lock file(s) removed" in done.stdout
    assert not os.path.lexists(old + ".lock")


def test_archive_to_removes_the_stray_lock_rather_than_moving_it(tmp_path: Path) -> None:
    sessions, dest = tmp_path / "sessions", tmp_path / "kept"
    old = rotation_killed_before_letting_go(sessions)
    done = journal(tmp_path, "prune", str(sessions), "--older-than", "0s", "--archive-to",
                   str(dest), "--json")
    assert done.returncode == 0, done.stderr
    report = orjson.loads(done.stdout)
    assert [i["done"] for i in report["items"]] == [True]  # the whole session moved
    assert [(lock["path"], lock["done"]) for lock in report["locks"]] == [(old + ".lock", True)]
    assert everything(sessions) == {}
    assert not any(name.endswith(".lock") for name in everything(dest))


def test_the_lock_beside_a_pending_rotation_stays_with_it(tmp_path: Path) -> None:
    """Killed after archiving, before removing its intent: the old file's lock goes with the
    rest of that rotation once it is finished, not before."""
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    old = make_session(sessions)
    crash_by_sigkill(old, "archived")
    assert not os.path.lexists(old) and os.path.isfile(old + ".lock")
    before = everything(sessions)
    report = prune_json(tmp_path, sessions)
    assert report["locks"] == [{"path": old + ".lock", "action": "skip",
                                "reason": PENDING_INTENT, "done": False, "error": None}]
    assert everything(sessions) == before
    assert journal(tmp_path, "repair", str(sessions)).returncode == 0
    assert not os.path.lexists(old + ".lock")  # finishing the rotation removed it
    assert prune_json(tmp_path, sessions)["locks"] == []


HOLDER = r"""
import sys
from journal.lock import WriterLock
with WriterLock(sys.argv[1], timeout=10):
    print("held", flush=True)
    sys.stdin.read()
"""


def test_a_lock_a_live_process_holds_is_kept_though_its_session_file_is_missing(
        tmp_path: Path) -> None:
    """As `Session.create` holds it before the file exists: prune leaves it, and the lock
    still excludes other writers afterwards."""
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    session = str(sessions / "2026-01-01T00-00-00-000Z_new.jsonl")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, session], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=env(tmp_path))
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        for flags in (("--dry-run",), ()):
            report = prune_json(tmp_path, sessions, *flags)
            assert report["locks"] == [{"path": session + ".lock", "action": "skip",
                                        "reason": f"held by pid {holder.pid}", "done": False,
                                        "error": None}]
        text = journal(tmp_path, "prune", str(sessions), "--older-than", "90d").stdout
        assert f"kept      {session}.lock: held by pid {holder.pid}" in text
        assert os.path.isfile(session + ".lock")
        with pytest.raises(LockTimeout):
            WriterLock(session, timeout=0).acquire()
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
    assert holder.returncode == 0
    assert not os.path.lexists(session + ".lock")  # its holder removed it as it let go


KILLED_WRITER = r"""
import os, signal, sys
from journal import Session
s = Session.open(sys.argv[1])
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_stale_lock_whose_session_file_exists_is_left_to_its_next_writer(
        tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    path = make_session(sessions)
    killed = subprocess.run([sys.executable, "-c", KILLED_WRITER, path], env=env(tmp_path),
                            capture_output=True, text=True, timeout=60)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert os.path.isfile(path + ".lock")
    before = everything(sessions)

    report = prune_json(tmp_path, sessions)
    assert [i["action"] for i in report["items"]] == ["skip"]  # recent
    assert report["locks"] == []  # not a stray: its session file is there
    assert everything(sessions) == before
    # and the lock module says why, if it is asked all the same
    assert remove_stray_lock(path + ".lock") == f"its session file {path} exists"
    assert os.path.isfile(path + ".lock")


def test_other_lock_files_links_and_fifos_are_left_alone(tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    old = rotation_killed_before_letting_go(sessions)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text('{"pid": 1, "host": "h", "since": "2026-01-01T00:00:00.000Z"}')
    record = Path(old + ".lock").read_bytes()
    planted = {
        # not named for a session file: a user's own
        "notes.lock": b"mine",
        "build.txt.lock": record,
        ".hidden.jsonl.lock": record,
        # named for one, but another program's (OpenClaw locks by the file existing)
        "openclaw.jsonl.lock": b'{"pid": 4242, "createdAt": "2026-01-01T00:00:00.000Z"}',
        "empty.jsonl.lock": b"",
    }
    for name, data in planted.items():
        (sessions / name).write_bytes(data)
    os.symlink(elsewhere, sessions / "link.jsonl.lock")
    os.mkfifo(sessions / "fifo.jsonl.lock")
    os.link(elsewhere, sessions / "hard.jsonl.lock")
    (sessions / "folder.jsonl.lock").mkdir()  # proper-lockfile's kind: a directory
    before = everything(sessions)

    report = prune_json(tmp_path, sessions)
    reasons = {os.path.basename(lock["path"]): (lock["action"], lock["reason"])
               for lock in report["locks"]}
    assert all(set(lock) == LOCK_KEYS for lock in report["locks"])
    assert reasons.pop(os.path.basename(old) + ".lock") == ("remove", None)
    assert reasons == {
        "openclaw.jsonl.lock": ("skip", "holds no writer record of this store (pid, host, "
                                "since): perhaps another program's lock; left alone"),
        "empty.jsonl.lock": ("skip", "holds no writer record of this store (pid, host, "
                             "since): perhaps another program's lock; left alone"),
        "link.jsonl.lock": ("skip", "is a symbolic link, not a lock file this store made"),
        "fifo.jsonl.lock": ("skip", "is a FIFO (named pipe), not a lock file this store made"),
        "hard.jsonl.lock": ("skip", "has 2 hard links, not a lock file this store made"),
    }  # a folder is no lock file of ours: not even looked at
    assert everything(sessions) == {k: v for k, v in before.items()
                                    if k != os.path.basename(old) + ".lock"}
    assert os.path.islink(sessions / "link.jsonl.lock") and elsewhere.exists()
    assert (sessions / "fifo.jsonl.lock").is_fifo()
    assert (sessions / "folder.jsonl.lock").is_dir()


def test_the_report_json_keeps_its_fields_and_adds_locks(tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    old = rotation_killed_before_letting_go(sessions)
    report = prune_json(tmp_path, sessions, "--dry-run")
    assert set(report) == {"cutoff", "dryRun", "items", "locks"}
    assert all(set(i) == {"path", "id", "last", "action", "reason", "files", "movedTo", "done",
                          "error"} for i in report["items"])
    [lock] = report["locks"]
    assert set(lock) == LOCK_KEYS and lock["path"] == old + ".lock"

    from datetime import timedelta

    from journal import prune
    library = prune([str(sessions)], timedelta(days=90), dry_run=True)
    assert library.to_json()["locks"] == report["locks"]
    assert not library.failed


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
            time.sleep(0.002)  # held a while: a second holder would find it there
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
