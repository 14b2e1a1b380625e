"""`journal ls` and `journal prune` (journal.catalog): rows, damage, locks, retention."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from corruption import gen_session_module
from test_rotate import build_session
from third_party import pi_path

from journal import Session, inbox_path, load, prune, rotate, sessions
from journal.catalog import parse_age, sort_rows
from journal.lock import WriterLock

OLD = time.time() - 200 * 86400


def rotated(directory: Path) -> tuple[str, str]:
    """A session rotated once, its old file archived as `.gz`: (live path, archive path)."""
    s, _ = build_session(directory)
    path = s.path
    s.close()
    result = rotate(path)
    assert result.rotated and result.archive and result.archive.endswith(".gz")
    assert result.successor is not None
    return result.successor, result.archive


def ids_of(paths: list[str]) -> set[str]:
    return {e["id"] for p in paths for e in load(p).entries}


def generated(directory: Path, seed: int, size: int = 20_000) -> Path:
    path = directory / f"gen-{seed}.jsonl"
    gen_session_module().generate(path, target_bytes=size, seed=seed, branch_every=3,
                                  compaction_every_bytes=size // 3)
    return path


def age(*paths: str | Path) -> None:
    for p in paths:
        os.utime(p, (OLD, OLD))


def files_under(folder: Path) -> list[str]:
    return sorted(os.path.realpath(p) for p in folder.rglob("*") if p.is_file())


def run_cli(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(tmp_path), "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "journal.cli", *argv], capture_output=True,
                          text=True, env=env, timeout=60)


def test_a_rotated_lineage_is_one_row_counting_each_entry_once(tmp_path):
    live, archive = rotated(tmp_path)
    rows = sessions([str(tmp_path)])
    assert len(rows) == 1
    row = rows[0]
    assert row.path == os.path.realpath(live)
    assert row.files == (os.path.realpath(archive), os.path.realpath(live))
    # the successor repeats the kept entries with their ids: counted once
    assert row.entries == len(ids_of([archive, live]))
    assert row.entries < len(load(archive).entries) + len(load(live).entries)
    assert row.size == os.path.getsize(archive) + os.path.getsize(live)
    assert row.name == "rotation test"
    assert row.cwd == "/proj"
    assert "m2" in row.models
    assert row.first == load(archive).header["timestamp"]
    assert row.last == load(live).entries[-1]["timestamp"]
    assert row.state == "live" and row.problems == ()


def test_generated_sessions_one_row_each_with_their_entry_count(tmp_path):
    paths = [generated(tmp_path, seed) for seed in range(3)]
    rows = {r.path: r for r in sessions([str(tmp_path)])}
    assert set(rows) == {os.path.realpath(p) for p in paths}
    for p in paths:
        snap = load(p)
        row = rows[os.path.realpath(p)]
        assert row.entries == len(snap.entries)
        assert row.session_id == snap.header["id"]
        assert row.last == snap.entries[-1]["timestamp"]
        assert row.models  # the generator's assistant messages name their model


def test_a_damaged_file_is_a_row_and_the_others_are_listed(tmp_path):
    good = generated(tmp_path, 1)
    torn = tmp_path / "torn.jsonl"
    torn.write_bytes(generated(tmp_path, 2).read_bytes()[:-40])
    os.unlink(tmp_path / "gen-2.jsonl")
    (tmp_path / "junk.jsonl").write_bytes(b"\x00\x00garbage\n{\"type\n")
    rows = {os.path.basename(r.path): r for r in sessions([str(tmp_path)])}
    assert set(rows) == {"gen-1.jsonl", "torn.jsonl", "junk.jsonl"}
    assert rows["gen-1.jsonl"].state == "live"
    assert rows["torn.jsonl"].state == "needs-repair"
    assert any("torn" in p for p in rows["torn.jsonl"].problems)
    assert rows["junk.jsonl"].state == "needs-repair"
    assert "no session header" in rows["junk.jsonl"].problems
    proc = run_cli(tmp_path, "ls", str(tmp_path), "--json")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    listed = {os.path.basename(r["path"]): r["state"] for r in json.loads(proc.stdout)}
    assert listed == {"gen-1.jsonl": "live", "torn.jsonl": "needs-repair",
                      "junk.jsonl": "needs-repair"}
    assert str(good.name) in proc.stdout
    proc = run_cli(tmp_path, "ls", str(tmp_path))  # the table: the problems go to stderr
    assert proc.returncode == 0, proc.stderr
    warned = sorted(line.split(": ", 2)[1] for line in proc.stderr.splitlines()
                    if line.startswith("Warning: "))  # as search writes a damaged line's
    assert warned == sorted(str(tmp_path / name) for name in ("torn.jsonl", "junk.jsonl"))


def test_a_held_session_is_locked_by_its_pid(tmp_path):
    s = Session.create(str(tmp_path), cwd="/w")
    s.append_message({"role": "user", "content": "hi", "timestamp": 1})
    try:
        [row] = sessions([str(tmp_path)])
        assert row.state == "locked" and row.holder_pid == os.getpid()
    finally:
        s.close()
    [row] = sessions([str(tmp_path)])
    assert row.state == "live" and row.holder_pid is None


def test_sorting_and_the_text_output(tmp_path):
    for seed in range(3):
        generated(tmp_path, seed, size=10_000 * (seed + 1))
    rows = sessions([str(tmp_path)])
    by_size = sort_rows(rows, "size")
    assert [r.size for r in by_size] == sorted((r.size for r in rows), reverse=True)
    assert [r.path for r in sort_rows(rows, "path")] == sorted(r.path for r in rows)
    proc = run_cli(tmp_path, "ls", str(tmp_path), "--sort", "size", "--reverse")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split("\t")[:3] == ["name", "id", "cwd"]
    assert [line.split("\t")[-1] for line in lines[1:]] == [r.path for r in by_size[::-1]]


def test_ls_errors_are_one_line(tmp_path):
    proc = run_cli(tmp_path, "ls", str(tmp_path / "nope"))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [f"Error: {tmp_path / 'nope'}: no such file "
                                                "or folder"]


def test_pi_fixtures_are_listed(tmp_path):
    source = pi_path("all-types.jsonl")
    copy = tmp_path / "all-types.jsonl"
    copy.write_bytes(source.read_bytes())
    [row] = sessions([str(tmp_path)])
    snap = load(copy)
    assert row.session_id == snap.header["id"]
    assert row.entries == len({e["id"] for e in snap.entries})
    assert row.cwd == snap.header["cwd"]


def test_parse_age():
    assert parse_age("90d") == timedelta(days=90)
    assert parse_age("2w") == timedelta(weeks=2)
    assert parse_age("12h") == timedelta(hours=12)
    with pytest.raises(Exception, match="not an age"):
        parse_age("soon")


def test_prune_removes_whole_idle_lineages_and_never_a_locked_one(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    live, archive = rotated(tmp_path / "a")
    held = Session.create(str(tmp_path / "b"), cwd="/w")
    held.append_message({"role": "user", "content": "hi", "timestamp": 1})
    (tmp_path / "c").mkdir()
    junk = tmp_path / "c" / "junk.jsonl"
    junk.write_bytes(b"garbage\n")
    quarantine = live + ".quarantine"
    Path(quarantine).write_bytes(b"kept bytes")
    later = datetime.now(UTC) + timedelta(days=100)
    everything = files_under(tmp_path)
    try:
        age(live, archive, quarantine, held.path, junk)
        dry = prune([str(tmp_path)], timedelta(days=90), dry_run=True, now=later)
        assert files_under(tmp_path) == everything
        [chosen] = dry.pruned
        assert chosen.files == [os.path.realpath(archive), os.path.realpath(live),
                                os.path.realpath(quarantine)]
        reasons = {os.path.basename(i.row.path): i.reason for i in dry.items
                   if i.action == "skip"}
        assert reasons[os.path.basename(held.path)].startswith("locked by pid")
        assert reasons["junk.jsonl"].startswith("needs repair")
        done = prune([str(tmp_path)], timedelta(days=90), now=later)
        [gone] = done.pruned
        assert gone.done and gone.files == chosen.files
        left = files_under(tmp_path)
        assert left == sorted(set(everything) - set(chosen.files))
        assert os.path.exists(held.path) and junk.exists()
    finally:
        held.close()


def test_prune_keeps_what_is_recent(tmp_path):
    live, archive = rotated(tmp_path)
    report = prune([str(tmp_path)], timedelta(days=90))
    assert report.pruned == []
    assert report.items[0].reason == "active since the cutoff"
    assert os.path.exists(live) and os.path.exists(archive)


def test_prune_cli_archives_to_a_folder_and_says_what_it_moved(tmp_path):
    sessions_dir = tmp_path / "sessions"
    sessions_dir.mkdir()
    old = generated(sessions_dir, 5)  # the generator's timestamps are years back
    age(old)
    fresh = Session.create(str(sessions_dir), cwd="/w")
    fresh.append_message({"role": "user", "content": "hi", "timestamp": 1})
    fresh.close()
    dest = tmp_path / "cold"
    proc = run_cli(tmp_path, "prune", str(sessions_dir), "--older-than", "90d", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert f"would remove {os.path.realpath(old)} (last activity 2026-01-15" in proc.stdout
    proc = run_cli(tmp_path, "prune", str(sessions_dir), "--older-than", "90d", "--dry-run",
                   "--archive-to", str(dest))
    assert f"    {os.path.realpath(old)} -> {dest / 'sessions' / old.name}" in proc.stdout
    assert old.exists() and not dest.exists()
    proc = run_cli(tmp_path, "prune", str(sessions_dir), "--older-than", "90d",
                   "--archive-to", str(dest), "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    [moved] = [i for i in report["items"] if i["action"] == "archive"]
    assert moved["done"] and moved["movedTo"] == [str(dest / "sessions" / old.name)]
    assert not old.exists() and (dest / "sessions" / old.name).exists()
    assert os.path.exists(fresh.path)


def test_prune_never_replaces_a_file_at_the_destination(tmp_path):
    sessions_dir = tmp_path / "sessions"
    sessions_dir.mkdir()
    old = generated(sessions_dir, 6)
    age(old)
    dest = tmp_path / "cold"
    (dest / "sessions").mkdir(parents=True)
    (dest / "sessions" / old.name).write_bytes(b"precious")
    report = prune([str(sessions_dir)], timedelta(days=90), archive_to=str(dest))
    [item] = report.pruned
    assert not item.done and item.error and "already exists" in item.error
    assert old.exists() and (dest / "sessions" / old.name).read_bytes() == b"precious"
    proc = run_cli(tmp_path, "prune", str(sessions_dir), "--older-than", "90d",
                   "--archive-to", str(dest))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_prune_skips_a_lineage_whose_lock_is_taken_meanwhile(tmp_path, monkeypatch):
    old = generated(tmp_path, 7)
    age(old)
    lock = WriterLock(str(old), timeout=0)
    lock.acquire()
    try:
        from journal import catalog

        monkeypatch.setattr(catalog, "current_holder", lambda path: None)
        report = prune([str(tmp_path)], timedelta(days=90))
        [item] = report.items
        assert item.action == "skip" and item.reason == "a writer took the lock"
        assert old.exists()
    finally:
        lock.release()


def live_name_of(live: str, archive: str) -> str:
    """The name the rotated file `archive` had while live, beside the live file."""
    return os.path.join(os.path.dirname(live), os.path.basename(archive).removesuffix(".gz"))


@pytest.mark.parametrize("queued_to", ["live", "predecessor"])
def test_prune_keeps_a_session_with_messages_queued_for_its_agent(tmp_path, queued_to):
    """A message queued with `journal-agent queue` waits in `<file>.inbox/` until an agent
    reads it: pruning the session would drop it silently. So does one queued to a rotated
    file's name (while it was live, or by a version that did not follow the rotation), in the
    inbox of that name beside the live file, where the agent on the live file reads it. An
    empty inbox goes with the session instead of being left behind."""
    (tmp_path / "waiting").mkdir()
    (tmp_path / "done").mkdir()
    waiting, waiting_archive = rotated(tmp_path / "waiting")
    done, done_archive = rotated(tmp_path / "done")
    if queued_to == "live":
        in_waiting, in_done = waiting, done
    else:
        in_waiting = live_name_of(waiting, waiting_archive)
        in_done = live_name_of(done, done_archive)
    Path(inbox_path(in_waiting)).mkdir()
    Path(inbox_path(in_waiting), "00000000000000000001-q1.json").write_text("{}")
    Path(inbox_path(in_done)).mkdir()
    age(waiting, waiting_archive, done, done_archive)
    later = datetime.now(UTC) + timedelta(days=100)
    report = prune([str(tmp_path)], timedelta(days=90), now=later)
    reasons = {os.path.basename(i.row.path): (i.action, i.reason) for i in report.items}
    action, reason = reasons[os.path.basename(waiting)]
    assert action == "skip" and "queued for an agent" in reason
    assert os.path.exists(waiting) and os.path.exists(inbox_path(in_waiting))
    [gone] = report.pruned
    assert gone.done and gone.row.path == os.path.realpath(done)
    assert not os.path.exists(done) and not os.path.exists(inbox_path(in_done))


def test_ls_on_a_terminal_keeps_a_row_on_one_line(tmp_path):
    """A long title (a Claude Code summary, a pi session name) was wrapped a word a line, and
    in 120 columns every column was squeezed to a few letters a line."""
    folder = tmp_path / "sessions"
    folder.mkdir()
    title = "a very long session title that names what the session did word after word " * 2
    with Session.create(folder, cwd="/work/some/deep/project/folder/of/a/user") as s:
        s.append_session_info(title.strip())
        s.append_message({"role": "user", "content": "hi", "timestamp": 1})
        path = s.path
    lines = ls_on_a_terminal(tmp_path, folder)
    text = "\n".join(lines)
    with Session.open(path) as s:
        short_id = s.header["id"][:8]
    rows = [line for line in lines if short_id in line]
    assert len(rows) == 1, text  # the session's row: one line
    assert "a very long" in rows[0] and rows[0].rstrip().endswith("live"), text
    assert max(len(line.rstrip()) for line in lines) <= 120, text
    assert len(lines) == 3, text  # the heading, its rule and the row: nothing wrapped


def ls_on_a_terminal(tmp_path: Path, folder: Path) -> list[str]:
    """`journal ls FOLDER`'s non-blank lines on a terminal of 120 columns, escapes removed."""
    import pty

    master, slave = pty.openpty()
    env = {**os.environ, "HOME": str(tmp_path), "NO_COLOR": "1", "COLUMNS": "120",
           "LINES": "40", "TERM": "xterm"}
    done = subprocess.run([sys.executable, "-m", "journal.cli", "ls", str(folder)],
                          stdin=subprocess.DEVNULL, stdout=slave, stderr=subprocess.PIPE,
                          env=env, timeout=60)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the other end is closed and drained
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert done.returncode == 0, done.stderr
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.decode())  # bold headings
    return [line for line in text.splitlines() if line.strip()]


def test_ls_tells_sessions_made_in_the_same_minute_apart(tmp_path):
    """pi's session ids are UUIDv7: their first 8 characters are the time they were made, in
    units of about 65 seconds, so a table cut each to 8 showed one id for all of them."""
    folder = tmp_path / "sessions"
    folder.mkdir()
    ids = ["01a23a36-c392-7000-8000-00000000000a", "01a23a36-c392-7000-8000-00000000000b",
           "01a23a36-d000-7000-8000-000000000000", "01b00000-0000-7000-8000-000000000000"]
    for n, session_id in enumerate(ids):
        header = {"type": "session", "version": 3, "id": session_id,
                  "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/w"}
        entry = {"type": "message", "id": f"e{n:07d}", "parentId": None,
                 "timestamp": "2026-01-01T00:00:01.000Z",
                 "message": {"role": "user", "content": "hi", "timestamp": 1}}
        (folder / f"s{n}.jsonl").write_text(json.dumps(header) + "\n" + json.dumps(entry) + "\n")
    lines = ls_on_a_terminal(tmp_path, folder)
    shown = {word for line in lines for word in line.split() if word.startswith("01")}
    assert shown == {ids[0], ids[1], "01a23a36-d", "01b00000"}, lines
    # for a program: the whole id, whatever the other rows hold
    proc = run_cli(tmp_path, "ls", str(folder), "--sort", "path")
    assert proc.returncode == 0, proc.stderr
    assert [line.split("\t")[1] for line in proc.stdout.splitlines()[1:]] == ids
