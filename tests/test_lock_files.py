"""Lock files do not pile up: removed by their last holder under the lock, never made by a
read-only command, and told apart (held or stale) by `journal info`."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import orjson

from journal import Session
from journal.lock import WriterLock, lock_state

ROOT = Path(__file__).resolve().parent.parent

STRESS_CHILD = r"""
import os, sys, time
sys.path.insert(0, sys.argv[4])
from journal.lock import WriterLock
session, inside, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
end = time.monotonic() + seconds
rounds = clashes = 0
while time.monotonic() < end:
    with WriterLock(session, timeout=30):
        try:
            fd = os.open(inside, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            clashes += 1  # someone else believes it holds the lock too
        else:
            os.close(fd)
            os.unlink(inside)
    rounds += 1
print(rounds, clashes)
"""


def env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}


def test_writers_racing_with_lock_file_removal_never_both_hold_it(tmp_path: Path) -> None:
    session = str(tmp_path / "s.jsonl")
    Path(session).write_bytes(b"")
    inside = str(tmp_path / "inside")
    children = [subprocess.Popen([sys.executable, "-c", STRESS_CHILD, session, inside, "3",
                                  str(ROOT)], stdout=subprocess.PIPE, text=True,
                                 env=env(tmp_path)) for _ in range(4)]
    results = [child.communicate(timeout=60)[0].split() for child in children]
    assert all(child.returncode == 0 for child in children)
    rounds = sum(int(r[0]) for r in results)
    clashes = sum(int(r[1]) for r in results)
    assert rounds > 200, "the stress loop barely ran"
    assert clashes == 0, f"two writers held the lock at once {clashes} time(s) in {rounds}"
    assert not os.path.exists(session + ".lock"), "the last holder removes the lock file"


def test_lock_file_is_removed_on_release_and_stale_ones_are_told_apart(
        tmp_path: Path) -> None:
    path = str(tmp_path / "a.jsonl")
    with Session.create(path, cwd="/") as s:
        assert lock_state(path) == "held"
        s.append_message({"role": "user", "content": "hi", "timestamp": 1})
    assert not os.path.exists(path + ".lock")
    assert lock_state(path) == "none"
    Path(path + ".lock").write_text('{"pid": 1}')  # a crash of an older version left it
    assert lock_state(path) == "stale"
    with WriterLock(path, 1) as lock:  # reused, then removed
        assert lock.held and lock_state(path) == "held"
    assert not os.path.exists(path + ".lock")


def journal(tmp_path: Path, *argv: str, stdin: bytes = b"") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "journal.cli", *argv], input=stdin.decode(),
                          capture_output=True, text=True, env=env(tmp_path), timeout=60)


def listing(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            if p.is_file() else "dir" for p in sorted(folder.rglob("*"))}


def rotatable(folder: Path) -> str:
    with Session.create(folder, cwd="/") as s:
        for i in range(8):
            s.append_message({"role": "user", "content": f"q{i} " + "x" * 500, "timestamp": 1})
        kept = s.append_message({"role": "user", "content": "kept", "timestamp": 1})
        s.append_compaction("summary", kept, 10)
        return s.path


def test_no_lock_file_after_new_failed_append_and_read_only_commands(tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    made = journal(tmp_path, "new", str(sessions), "--json")
    assert made.returncode == 0, made.stderr
    path = orjson.loads(made.stdout)["path"]
    assert not os.path.exists(path + ".lock"), "journal new left a lock file"

    failed = journal(tmp_path, "append", path, stdin=b"{not json\n")
    assert failed.returncode == 2 and failed.stderr.count("Error:") == 1
    assert not os.path.exists(path + ".lock"), "a failed append left a lock file"

    live = rotatable(sessions)
    before = listing(sessions)
    for argv in (["rotate", "--dry-run", live], ["repair", "--check", live],
                 ["repair", "--dry-run", live], ["info", live], ["show", live],
                 ["context", live], ["lineage", live], ["tail", live]):
        done = journal(tmp_path, *argv)
        assert done.returncode in (0, 1), (argv, done.stderr)
        assert "Traceback" not in done.stderr
        assert listing(sessions) == before, f"{argv} created or changed a file"


def test_info_tells_a_stale_lock_file_from_a_held_one(tmp_path: Path) -> None:
    path = str(tmp_path / "a.jsonl")
    Session.create(path, cwd="/").close()
    shown = journal(tmp_path, "info", path, "--json")
    assert orjson.loads(shown.stdout)["lockFile"] == "none"
    Path(path + ".lock").write_text("{}")
    shown = journal(tmp_path, "info", path, "--json")
    assert orjson.loads(shown.stdout)["lockFile"] == "stale"
    text = journal(tmp_path, "info", path).stdout
    assert "stale lock file" in text
    with Session.open(path):
        shown = journal(tmp_path, "info", path, "--json")
        assert orjson.loads(shown.stdout)["lockFile"] == "held"
        assert orjson.loads(shown.stdout)["lockHolder"]["pid"] == os.getpid()
    time.sleep(0)


def test_rotate_dry_run_takes_no_lock(tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    path = rotatable(sessions)
    with Session.open(path):  # another writer holds the lock: a dry run need not wait
        done = journal(tmp_path, "rotate", "--dry-run", "--lock-timeout", "0.2", path)
        assert done.returncode == 0, done.stderr
        assert "would rotate" in done.stdout
    assert not os.path.exists(path + ".lock")


def test_read_commands_on_archived_sessions_make_no_lock_file(tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    path = rotatable(sessions)
    for compress in ([], ["--no-compress"]):
        done = journal(tmp_path, "rotate", *compress, path, "--json")
        assert done.returncode == 0, done.stderr
        with Session.open(path) as s:  # something to rotate again
            for i in range(8):
                s.append_message({"role": "user", "content": f"more {i} " + "y" * 500,
                                  "timestamp": 1})
            kept = s.append_message({"role": "user", "content": "kept", "timestamp": 1})
            s.append_compaction("again", kept, 10)
    archived = sorted(str(p) for p in (sessions / "archive").iterdir())
    assert any(a.endswith(".gz") for a in archived) and any(a.endswith(".jsonl") for a in archived)
    before = listing(sessions)
    for archive in archived:
        for argv in (["info", archive], ["show", archive], ["lineage", archive],
                     ["tail", archive], ["context", archive], ["rotate", "--dry-run", archive],
                     ["repair", "--check", archive]):
            done = journal(tmp_path, *argv)
            assert "Traceback" not in done.stderr, (argv, done.stderr)
            assert listing(sessions) == before, f"{argv} created or changed a file"


HOLDER = r"""
import sys, time
from journal import Session
with Session.open(sys.argv[1]):
    print("held", flush=True)
    time.sleep(60)
"""


def test_a_writer_killed_by_sigkill_leaves_a_stale_lock_file_the_next_one_reuses(
        tmp_path: Path) -> None:
    """What docs/safety.md says: not only older versions leave one; harmless all the same."""
    import signal

    path = str(tmp_path / "a.jsonl")
    Session.create(path, cwd="/").close()
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, path], stdout=subprocess.PIPE,
                              text=True, env=env(tmp_path))
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        assert lock_state(path) == "held"
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    assert os.path.exists(path + ".lock") and lock_state(path) == "stale"
    with Session.open(path, lock_timeout=1) as s:  # not blocked: the flock died with it
        s.append_message({"role": "user", "content": "after", "timestamp": 1})
    assert not os.path.exists(path + ".lock")
