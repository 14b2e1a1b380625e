"""`journal rotate DIR`: every live session under a folder, one at a time, as a nightly job
runs it: the same options as for one file, skipped sessions with their reason, a busy
writer waited for and reported, one failure not stopping the rest."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import paused_cli
from test_rotate import build_session, user

from journal import Session
from journal.lineage import lineage, resolve_live

ROOT = Path(__file__).resolve().parents[1]


def journal(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "journal.cli", *argv], capture_output=True,
                          text=True, env=env, timeout=120)


def rotatable(folder: Path) -> str:
    s, _ = build_session(folder)
    path = s.path
    s.close()
    return path


def by_path(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["path"]: row for row in report["sessions"]}


def test_every_session_that_can_rotate_rotates_and_the_rest_say_why(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    first, nested = rotatable(tmp_path), rotatable(tmp_path / "sub")
    with Session.create(tmp_path, cwd="/w") as s:
        s.append_message(user("no compaction yet"))
        plain = s.path
    junk = tmp_path / "junk.jsonl"
    junk.write_text("not a session\n")
    done = journal("rotate", str(tmp_path), "--keep", "0", "--json")
    assert done.returncode == 2, done.stderr  # junk failed; the others were done all the same
    report = orjson.loads(done.stdout)
    rows = by_path(report)
    assert report["counts"] == {"rotated": 2, "skipped": 1, "busy": 0, "failed": 1}
    for path in (first, nested):
        row = rows[path]
        assert row["status"] == "rotated" and row["result"]["successor"]
        assert row["result"]["removedArchives"]  # --keep 0, as for one file
        assert resolve_live(path)[0] == row["result"]["successor"]
        assert lineage(row["result"]["successor"]) == [row["result"]["successor"]]
    assert rows[plain]["status"] == "skipped"
    assert rows[plain]["reason"] == "no compaction on the active branch"
    assert rows[str(junk)]["status"] == "failed" and "not a session" in rows[str(junk)]["reason"]
    progress = [line for line in done.stderr.splitlines() if line.startswith("journal: [")]
    assert len(progress) == 4 and progress[0].startswith("journal: [1/4] ")
    assert f"Error: {junk}: not a session file" in done.stderr
    assert open(plain).read().count("\n") == 2 and junk.read_text() == "not a session\n"

    again = journal("rotate", str(tmp_path))  # text; nothing left to rotate
    assert again.returncode == 2
    assert again.stdout.splitlines()[-1] == (
        f"{tmp_path}: 4 session(s): rotated 0, skipped 3, busy 0, failed 1")


def test_a_session_its_writer_holds_is_waited_for_then_reported_busy(tmp_path: Path) -> None:
    free, held = rotatable(tmp_path), rotatable(tmp_path)
    archive = tmp_path / "elsewhere"
    with Session.open(held):  # this process holds its lock; the command is another one
        done = journal("rotate", str(tmp_path), "--lock-timeout", "0.5", "--archive-dir",
                       str(archive), "--no-compress", "--json")
    assert done.returncode == 1, done.stderr  # busy, and nothing failed
    rows = by_path(orjson.loads(done.stdout))
    assert rows[held]["status"] == "busy"
    reason = rows[held]["reason"]
    assert reason.startswith(f"pid {os.getpid()} on {socket.gethostname()} since "), reason
    assert reason.endswith(" is writing it; left for a later run"), reason
    # a note, not an error: the writer is at work, and telling to close it is wrong advice
    assert "Error:" not in done.stderr and "Close the other writer" not in done.stderr
    assert f"{held}: busy (pid {os.getpid()} on " in done.stderr
    assert rows[free]["status"] == "rotated"
    assert rows[free]["result"]["archive"] == str(archive / os.path.basename(free))
    assert os.path.exists(held) and resolve_live(held)[0] == held
    empty = tmp_path / "empty"
    empty.mkdir()
    nothing = journal("rotate", str(empty))  # a folder named by mistake, as `repair DIR`
    assert nothing.returncode == 2 and "no sessions" in nothing.stderr
    dry = journal("rotate", str(tmp_path), "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    rows = by_path(orjson.loads(dry.stdout))
    assert rows[held]["status"] == "rotated" and rows[held]["result"]["dryRun"]
    assert resolve_live(held)[0] == held  # a dry run changes nothing


def test_busy_sessions_share_one_lock_timeout_and_a_brief_writer_is_waited_for(
        tmp_path: Path) -> None:
    held = [rotatable(tmp_path) for _ in range(3)]
    brief = rotatable(tmp_path)
    # a writer that lets go soon (an append, say): held when its turn comes, free later
    script = ("import sys, time; from journal import Session\n"
              "with Session.open(sys.argv[1]):\n"
              "    print('held', flush=True); time.sleep(1.5)\n")
    child = subprocess.Popen([sys.executable, "-c", script, brief], stdout=subprocess.PIPE,
                             text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert child.stdout is not None and child.stdout.readline() == "held\n"
    try:
        with Session.open(held[0]), Session.open(held[1]), Session.open(held[2]):
            started = time.monotonic()
            done = journal("rotate", str(tmp_path), "--lock-timeout", "3", "--json")
            took = time.monotonic() - started
    finally:
        child.wait(timeout=30)
    assert done.returncode == 1, done.stderr
    rows = by_path(orjson.loads(done.stdout))
    assert [rows[p]["status"] for p in held] == ["busy"] * 3
    assert rows[brief]["status"] == "rotated"  # tried again once the others were done
    # one wait of 3 s for all of them, not 3 s for each (and the command's own start-up)
    assert took < 3 * 3, took


def test_a_session_its_writer_rotated_meanwhile_is_followed_not_failed(
        tmp_path: Path) -> None:
    first = rotatable(tmp_path)
    zz = tmp_path / "zz.jsonl"  # after `first` in the listing
    os.rename(rotatable(tmp_path), zz)
    # the folder run is held still while it publishes the first session's successor...
    child, _ = paused_cli.start(["rotate", str(tmp_path), "--keep", "2", "--json"],
                                pause_at=2, resumable=True)
    # ...and meanwhile zz's own writer rotates it, into an archive folder of its own
    own = journal("rotate", str(zz), "--archive-dir", str(tmp_path / "elsewhere"))
    assert own.returncode == 0, own.stderr
    successor = resolve_live(str(zz))[0]
    assert successor != str(zz) and not zz.exists()
    status, out, err = paused_cli.resume(child)
    assert status == 0, err  # a cron job must not take this for a failure
    assert "Error:" not in err
    report = orjson.loads(out)
    assert report["counts"] == {"rotated": 1, "skipped": 1, "busy": 0, "failed": 0}
    rows = by_path(report)
    assert rows[first]["status"] == "rotated"
    row = rows[str(zz)]
    assert row["status"] == "skipped"
    assert row["reason"].startswith(f"rotated meanwhile by its writer into {successor}; ")
    assert row["result"]["path"] == successor  # followed, as `rotate PATH` follows it
    assert f"[2/2] {zz}: skipped (rotated meanwhile by its writer" in err


TERMINATED_AFTER_ONE = """
import os, signal, sys
from journal import folder_rotation
from journal.cli import main

real, calls = folder_rotation.rotate, [0]

def rotate(*args, **kwargs):
    if not kwargs.get("dry_run"):
        calls[0] += 1
        if calls[0] == 2:  # the second session's rotation: a service manager stops the job
            os.kill(os.getpid(), signal.SIGTERM)
    return real(*args, **kwargs)

folder_rotation.rotate = rotate
sys.exit(main(sys.argv[1:]))
"""


def test_rotate_dir_stopped_by_sigterm_says_how_far_it_got(tmp_path: Path) -> None:
    """Stopped mid-way, `rotate DIR` exited 143 with its last progress line only: a nightly
    job's log did not say that it stopped, nor that running it again finishes."""
    folder = tmp_path / "s"
    folder.mkdir()
    for _ in range(3):
        rotatable(folder)
    done = subprocess.run([sys.executable, "-c", TERMINATED_AFTER_ONE, "rotate", str(folder)],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 143, done.stderr
    assert "rotate interrupted after 1 of 3 session(s)" in done.stderr, done.stderr
    assert "run it again to finish" in done.stderr
    again = journal("rotate", str(folder))
    assert again.returncode == 0, again.stderr


def version_1_session(path: Path) -> bytes:
    """A pi session of format version 1 (no ids; as pi wrote them once), of two turns."""
    lines = [{"type": "session", "id": "v1-session", "timestamp": "2025-01-01T00:00:00.000Z",
              "cwd": "/w"}]
    for i, role in enumerate(("user", "assistant")):
        content = f"turn {i}" if role == "user" else [{"type": "text", "text": f"turn {i}"}]
        lines.append({"type": "message", "timestamp": "2025-01-01T00:00:01.000Z",
                      "message": {"role": role, "content": content, "timestamp": 1}})
    data = b"".join(orjson.dumps(line) + b"\n" for line in lines)
    path.write_bytes(data)
    return data


def test_a_version_1_session_is_skipped_with_how_to_rotate_it_not_failed(
        tmp_path: Path) -> None:
    """A nightly `rotate DIR` over sessions as pi left them: a version 1 session made the
    run exit 2 every night ("failed") until someone migrated it. It is skipped, with the
    reason and what rotates it, and left as it is; `rotate FILE` of it is still an error."""
    rotated = rotatable(tmp_path)
    old = tmp_path / "old.jsonl"
    data = version_1_session(old)
    done = journal("rotate", str(tmp_path), "--json")
    assert done.returncode == 0, (done.stdout, done.stderr)
    report = orjson.loads(done.stdout)
    assert report["counts"] == {"rotated": 1, "skipped": 1, "busy": 0, "failed": 0}
    rows = by_path(report)
    assert rows[rotated]["status"] == "rotated"
    assert rows[str(old)]["status"] == "skipped"
    assert rows[str(old)]["reason"] == (
        f"session format version 1: only version 3 files rotate; run 'journal repair "
        f"--migrate {old}' first")
    assert old.read_bytes() == data
    alone = journal("rotate", str(old))
    assert alone.returncode == 2 and "session format version 1" in alone.stderr
