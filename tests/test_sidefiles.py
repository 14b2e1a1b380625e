"""Side files made safely: no writes through planted links, only regular files, full disks,
leftovers after crashes, permissions (issue 11 items 4, 6, 8, 12 and 14).

Crashes are real SIGKILLs of child processes; full disks are a real small tmpfs (skipped
where mounting is not permitted) or an injected ENOSPC on the one descriptor under test.
"""

from __future__ import annotations

import base64
import errno
import gzip
import os
import random
import resource
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from mounts import tmpfs

from journal import Session, load
from journal.cli import main as journal_main
from journal.errors import NoSpace, UnsafeFile
from journal.lineage import intent_path, lineage, resolve_live, write_intent
from journal.quarantine import read_quarantine
from journal.repair import repair
from journal.rotation import rotate

ROOT = Path(__file__).resolve().parents[1]
CHILD_TIMEOUT = 30


def user(text: str) -> dict:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


def assistant(text: str) -> dict:
    return {"role": "assistant", "content": [{"type": "text", "text": text}],
            "provider": "anthropic", "model": "m1", "stopReason": "stop", "timestamp": 2}


def noise(n: int, seed: int = 1) -> str:
    """Text that gzip cannot shrink much (base64 of random bytes)."""
    return base64.b64encode(random.Random(seed).randbytes(n * 3 // 4)).decode()


def make_rotatable(directory: Path, *, old_bytes: int = 6000, seed: int = 1) -> str:
    """A closed session whose kept part is small next to what lies before its compaction."""
    with Session.create(directory, cwd="/proj") as s:
        for i in range(4):
            s.append_message(user(f"old {i} " + noise(old_bytes // 4, seed + i)))
            s.append_message(assistant(f"old answer {i}"))
        kept = s.append_message(user("kept question"))
        s.append_message(assistant("kept answer"))
        s.append_compaction("summary of the old part", kept, 1000)
        s.append_message(user("after the compaction"))
        return s.path


def damaged(directory: Path, name: str = "s.jsonl", lines: int = 20, size: int = 200) -> str:
    """A closed session with a bad line in the middle and a torn last line."""
    with Session.create(directory / name, cwd="/proj") as s:
        for i in range(lines):
            s.append_message(user(f"m{i} " + "x" * size))
        path = s.path
    data = Path(path).read_bytes().splitlines(keepends=True)
    data.insert(len(data) // 2, b'{"type":"message","id":\n')
    Path(path).write_bytes(b"".join(data) + b'{"type":"message","id":"torn')
    return path


def run_cli(*args: str) -> int:
    return journal_main(list(args))


def child(script: str, *args: str, timeout: float = CHILD_TIMEOUT,
          limit_memory: bool = False) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}

    def limit() -> None:
        if limit_memory:
            resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    return subprocess.run([sys.executable, "-c", textwrap.dedent(script), *args], env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout,
                          preexec_fn=limit)


def outside_file(tmp_path: Path) -> Path:
    """A file outside the sessions folder that a planted link points at."""
    target = tmp_path / "outside" / "precious.txt"
    target.parent.mkdir()
    target.write_bytes(b"precious\n")
    return target


# item 4: planted links are never written through


def test_quarantine_link_is_not_written_through_on_open(tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    path = damaged(sessions)
    target = outside_file(tmp_path)
    os.symlink(target, path + ".quarantine")
    before = Path(path).read_bytes()
    with pytest.raises(UnsafeFile, match="symbolic link"):
        Session.open(path, lock_timeout=2)
    assert target.read_bytes() == b"precious\n"
    assert Path(path).read_bytes() == before, "nothing may leave the session unquarantined"


def test_quarantine_link_is_not_written_through_by_repair(tmp_path: Path) -> None:
    path = damaged(tmp_path / "sessions")
    target = outside_file(tmp_path)
    os.symlink(target, path + ".quarantine")
    before = Path(path).read_bytes()
    with pytest.raises(UnsafeFile):
        repair(path, lock_timeout=2)
    assert target.read_bytes() == b"precious\n"
    assert Path(path).read_bytes() == before
    assert sorted(os.listdir(os.path.dirname(path))) == sorted(
        [os.path.basename(path), os.path.basename(path) + ".quarantine"])


def test_quarantine_with_another_hard_link_is_refused(tmp_path: Path) -> None:
    path = damaged(tmp_path / "sessions")
    target = outside_file(tmp_path)
    os.link(target, path + ".quarantine")
    with pytest.raises(UnsafeFile, match="hard link"):
        Session.open(path, lock_timeout=2)
    assert target.read_bytes() == b"precious\n"


def test_planted_repair_temp_link_is_not_written_through(tmp_path: Path) -> None:
    path = damaged(tmp_path / "sessions")
    target = outside_file(tmp_path)
    directory, name = os.path.split(path)
    os.symlink(target, os.path.join(directory, f".{name}.repair.tmp"))
    report = repair(path, lock_timeout=2)
    assert report.changed
    assert target.read_bytes() == b"precious\n"
    assert not os.path.islink(path) and stat.S_ISREG(os.lstat(path).st_mode)
    assert load(path).diagnostics == []


def test_planted_compression_temp_link_is_not_written_through(tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    path = make_rotatable(sessions)
    target = outside_file(tmp_path)
    (sessions / "archive").mkdir(mode=0o700)
    name = os.path.basename(path)
    os.symlink(target, sessions / "archive" / f"{name}.gz.tmp")
    os.symlink(target, sessions / "archive" / f".{name}.gz.tmp")
    result = rotate(path, lock_timeout=2)
    assert target.read_bytes() == b"precious\n"
    assert result.rotated and not result.warnings
    with gzip.open(result.archive or "", "rb") as f:
        assert f.readline().startswith(b'{"type":"session"')


def test_planted_archive_folder_link_is_refused_before_anything_changes(tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    path = make_rotatable(sessions)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, sessions / "archive")
    before = Path(path).read_bytes()
    with pytest.raises(UnsafeFile, match="symbolic link"):
        rotate(path, lock_timeout=2)
    assert list(elsewhere.iterdir()) == []
    assert Path(path).read_bytes() == before
    assert [n for n in os.listdir(sessions) if n.endswith(".jsonl")] == [os.path.basename(path)]
    with Session.open(path, lock_timeout=2) as s:
        s.append_message(user("still appendable"))


def test_intent_is_written_beside_a_planted_link_not_through_it(tmp_path: Path) -> None:
    path = make_rotatable(tmp_path / "sessions")
    target = outside_file(tmp_path)
    os.symlink(target, intent_path(path))
    write_intent(path, {"successor": "x.jsonl"})
    assert target.read_bytes() == b"precious\n"
    intent = intent_path(path)
    assert stat.S_ISREG(os.lstat(intent).st_mode)
    assert Path(intent).read_bytes() == b'{"successor":"x.jsonl"}\n'


# item 8: only regular files, bounded reads


@pytest.mark.parametrize("command", ["info", "show", "context", "tree", "rotate", "append",
                                     "repair", "lineage"])
def test_a_fifo_named_like_a_session_is_refused_at_once(tmp_path: Path, command: str) -> None:
    fifo = tmp_path / "x.jsonl"
    os.mkfifo(fifo)
    script = "import sys; from journal.cli import main; sys.exit(main(sys.argv[1:]))"
    try:
        done = child(script, command, str(fifo), timeout=10)
    except subprocess.TimeoutExpired:
        pytest.fail(f"journal {command} on a FIFO hung")
    assert done.returncode == 2, done.stderr
    assert "Error:" in done.stderr and "FIFO" in done.stderr, done.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(os.listdir(tmp_path)) == ["x.jsonl"], "a refused command left files behind"


def test_library_readers_and_writers_refuse_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "x.jsonl"
    os.mkfifo(fifo)
    script = """
        import sys
        from journal import Session, View, load
        from journal.errors import NotASession
        for call in (lambda p: load(p), lambda p: View.open(p),
                     lambda p: Session.open(p, lock_timeout=1)):
            try:
                call(sys.argv[1])
            except NotASession as e:
                print("refused:", e)
    """
    try:
        done = child(script, str(fifo), timeout=10)
    except subprocess.TimeoutExpired:
        pytest.fail("a library reader hung on a FIFO")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("refused:") == 3 and "FIFO" in done.stdout, done.stdout
    assert sorted(os.listdir(tmp_path)) == ["x.jsonl"], "a refused open left files behind"


def test_a_device_is_refused_without_reading_it(tmp_path: Path) -> None:
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero")
    script = "import sys; from journal.cli import main; sys.exit(main(sys.argv[1:]))"
    try:
        done = child(script, "info", "/dev/zero", timeout=10, limit_memory=True)
    except subprocess.TimeoutExpired:
        pytest.fail("journal info /dev/zero kept reading")
    assert done.returncode == 2, done.stderr[-500:]
    assert "device" in done.stderr, done.stderr[-500:]


def test_directory_repair_reports_a_fifo_and_goes_on(tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    path = damaged(sessions, "a.jsonl")
    os.mkfifo(sessions / "b.jsonl")
    script = "import sys; from journal.cli import main; sys.exit(main(sys.argv[1:]))"
    try:
        done = child(script, "repair", "--json", str(sessions), timeout=20)
    except subprocess.TimeoutExpired:
        pytest.fail("a directory repair hung on a FIFO")
    assert done.returncode == 2, done.stderr
    assert "b.jsonl" in done.stderr and "FIFO" in done.stderr, done.stderr
    assert load(path).diagnostics == [], "the regular file beside the FIFO was repaired"


def test_directory_repair_never_follows_a_link_out_of_the_folder(tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    inside = damaged(sessions, "a.jsonl")
    outside = damaged(tmp_path / "elsewhere", "b.jsonl")
    before = Path(outside).read_bytes()
    (sessions / "planted.jsonl").symlink_to(outside)
    assert run_cli("repair", str(sessions)) == 0
    assert load(inside).diagnostics == []
    assert Path(outside).read_bytes() == before
    assert not os.path.exists(outside + ".bak") and not os.path.exists(outside + ".quarantine")


# item 6: a full disk


def _fd_path(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


def test_enospc_writing_the_repair_temp_leaves_the_session_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = damaged(tmp_path / "sessions", size=2000)
    before = Path(path).read_bytes()
    real_write = os.write

    def write(fd: int, data: bytes) -> int:
        if ".repair" in _fd_path(fd):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    with pytest.raises(NoSpace) as caught:
        repair(path, lock_timeout=2)
    monkeypatch.undo()
    message = str(caught.value)
    assert ".repair." in message and os.path.dirname(path) in message, message
    assert caught.value.needed >= len(before) // 2
    assert f"needs {caught.value.needed:,} bytes" in message and "bytes free in" in message
    assert Path(path).read_bytes() == before
    leftovers = [n for n in os.listdir(os.path.dirname(path)) if n.endswith(".tmp")]
    assert leftovers == []
    with Session.open(path, lock_timeout=2) as s:
        s.append_message(user("appendable after the failed repair"))


def test_enospc_writing_the_successor_leaves_the_session_live_and_says_where(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sessions = tmp_path / "sessions"
    path = make_rotatable(sessions)
    before = Path(path).read_bytes()
    real_write = os.write

    def write(fd: int, data: bytes) -> int:
        if ".rotate." in _fd_path(fd):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    with pytest.raises(NoSpace) as caught:
        rotate(path, lock_timeout=2)
    monkeypatch.undo()
    assert str(sessions) in str(caught.value) and caught.value.needed > 0
    assert Path(path).read_bytes() == before
    assert sorted(os.listdir(sessions)) == sorted([os.path.basename(path), "archive"])
    with Session.open(path, lock_timeout=2) as s:
        s.append_message(user("appendable after the failed rotation"))


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    with tmpfs(tmp_path / "small", "512k") as mnt:
        yield mnt


def fill(mnt: Path, leave: int) -> Path:
    """Fill the tmpfs until about `leave` bytes stay free; return the filler to free later."""
    filler = mnt / "filler"
    free = os.statvfs(mnt).f_bavail * os.statvfs(mnt).f_frsize
    with open(filler, "wb") as f:
        f.write(b"\0" * max(0, free - leave))
    return filler


def test_repair_on_a_full_disk_names_the_space_and_leaves_appends_working(
    small_tmpfs: Path,
) -> None:
    path = damaged(small_tmpfs / "sessions", lines=40, size=2000)
    before = Path(path).read_bytes()
    filler = fill(small_tmpfs, 48 * 1024)
    with pytest.raises(NoSpace) as caught:
        repair(path, lock_timeout=2)
    assert path in str(caught.value) or os.path.dirname(path) in str(caught.value)
    assert caught.value.needed > len(before) // 2
    assert Path(path).read_bytes() == before
    assert [n for n in os.listdir(os.path.dirname(path)) if n.endswith(".tmp")] == []
    with Session.open(path, lock_timeout=2) as s:
        s.append_message(user("appended on the nearly full disk " + "y" * 4000))
    filler.unlink()
    assert repair(path, lock_timeout=2).changed


def test_rotation_reports_success_when_only_compression_hits_a_full_disk(
    small_tmpfs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sessions = small_tmpfs / "sessions"
    path = make_rotatable(sessions, old_bytes=128 * 1024)
    filler = fill(small_tmpfs, 40 * 1024)
    code = run_cli("rotate", path)
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "rotated into" in out and "Warning:" in err and "no space" in err, (out, err)
    archive = sessions / "archive"
    names = os.listdir(archive)
    plain = os.path.basename(path)
    assert plain in names and plain + ".gz" not in names
    assert [n for n in names if n.endswith(".tmp")] == [], names
    live = resolve_live(path)[0]
    with Session.open(live, lock_timeout=2) as s:
        s.append_message(user("appended after the rotation"))
    filler.unlink()
    assert not rotate(live, lock_timeout=2).rotated  # nothing new to rotate, but it retries
    names = os.listdir(archive)
    assert plain + ".gz" in names and plain not in names, names
    assert lineage(live)[0] == str(archive / (plain + ".gz"))


# item 12: leftovers after crashes


KILL_REPAIR_AT = """
    import importlib, os, signal, sys
    repair_mod = importlib.import_module("journal.repair")
    step = sys.argv[2]
    def die(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGKILL)
    if step == "quarantine":
        repair_mod.quarantine = die
    elif step == "backup":
        os.link = die
    repair_mod.repair(sys.argv[1], lock_timeout=5)
"""


def test_a_killed_repair_leaves_no_temp_after_the_next_open(tmp_path: Path) -> None:
    path = damaged(tmp_path / "sessions", lines=200, size=1000)
    before = Path(path).read_bytes()
    done = child(KILL_REPAIR_AT, path, "quarantine")
    assert done.returncode == -signal.SIGKILL, done.stderr
    directory = os.path.dirname(path)
    assert [n for n in os.listdir(directory) if n.endswith(".tmp")], "the kill left no temp"
    assert Path(path).read_bytes() == before
    with Session.open(path, lock_timeout=5) as s:
        s.append_message(user("after the killed repair"))
    assert [n for n in os.listdir(directory) if n.endswith(".tmp")] == []


def test_a_repair_killed_after_quarantining_does_not_quarantine_twice(tmp_path: Path) -> None:
    path = damaged(tmp_path / "sessions")
    done = child(KILL_REPAIR_AT, path, "backup")
    assert done.returncode == -signal.SIGKILL, done.stderr
    first = list(read_quarantine(path + ".quarantine"))
    assert first, "the killed repair quarantined nothing"
    with Session.open(path, lock_timeout=5) as s:  # cuts the torn tail it already copied
        s.append_message(user("appended between the two repairs"))
    assert repair(path, lock_timeout=5).changed
    records = [(r["offset"], r["reason"], r["data"]) for r in
               read_quarantine(path + ".quarantine")]
    assert len(records) == len(set(records)) == len(first), records
    assert load(path).diagnostics == []


KILL_COMPRESSION = """
    import importlib, os, signal, sys
    rotation = importlib.import_module("journal.rotation")
    def die(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGKILL)
    rotation.shutil.copyfileobj = die
    rotation.rotate(sys.argv[1], lock_timeout=5)
"""


def test_a_rotation_killed_while_compressing_is_cleaned_and_compressed_later(
    tmp_path: Path,
) -> None:
    sessions = tmp_path / "sessions"
    path = make_rotatable(sessions)
    done = child(KILL_COMPRESSION, path)
    assert done.returncode == -signal.SIGKILL, done.stderr
    archive = sessions / "archive"
    assert [n for n in os.listdir(archive) if n.endswith(".tmp")], "the kill left no temp"
    live = resolve_live(path)[0]
    with Session.open(live, lock_timeout=5) as s:
        s.append_message(user("after the killed compression"))
    assert [n for n in os.listdir(archive) if n.endswith(".tmp")] == []
    rotate(live, lock_timeout=5)
    name = os.path.basename(path)
    assert sorted(os.listdir(archive)) == [name + ".gz"]


def test_archived_sessions_take_their_side_files_and_leave_no_lock(tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    path = make_rotatable(sessions)
    with open(path, "ab") as f:
        f.write(b"not json\n")
    assert repair(path, lock_timeout=2).changed  # makes a .bak and a .quarantine
    names = [os.path.basename(path)]
    live = path
    for round_ in range(3):
        result = rotate(live, lock_timeout=2)
        assert result.rotated, result.reason
        live = result.successor or ""
        with Session.open(live, lock_timeout=2) as s:
            for i in range(4):
                s.append_message(user(f"round {round_} {i} " + noise(2000, round_ * 10 + i)))
            kept = s.append_message(user("kept"))
            s.append_compaction("summary", kept, 10)
            s.append_message(user("after"))
        names.append(os.path.basename(live))
    top = sorted(os.listdir(sessions))
    live_name = os.path.basename(live)
    assert top == sorted(["archive", live_name]), top
    archived = sorted(os.listdir(sessions / "archive"))
    first = names[0]
    assert archived == sorted([first + ".gz", first + ".bak", first + ".quarantine",
                               *(n + ".gz" for n in names[1:-1])]), archived
    assert not any(n.endswith(".lock") for n in archived)
    removed = rotate(live, keep=1, lock_timeout=2).removed_archives
    assert removed
    assert not (sessions / "archive" / (first + ".bak")).exists()
    assert not (sessions / "archive" / (first + ".quarantine")).exists()


def test_a_writer_waiting_on_a_rotating_session_leaves_no_lock_file_behind(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sessions = tmp_path / "sessions"
    path = make_rotatable(sessions)
    followed: dict[str, str] = {}
    with Session.open(path, lock_timeout=2) as s:

        def waiter() -> None:
            with Session.open(path, lock_timeout=10) as w:
                followed["path"] = w.path

        thread = threading.Thread(target=waiter)
        thread.start()
        time.sleep(0.2)  # the waiter is polling the lock now
        result = s.rotate(compress=False)
        live = s.path
    thread.join(15)
    assert result.rotated and followed["path"] == live
    assert not any("interrupted rotation" in r.getMessage() for r in caplog.records), (
        "the waiter took the lock while the rotation was still running")
    assert sorted(os.listdir(sessions)) == sorted(["archive", os.path.basename(live)])


# item 14: permissions


def test_directories_the_store_creates_are_private_at_any_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        sessions = tmp_path / "a" / "b" / "sessions"
        path = make_rotatable(sessions)
        result = rotate(path, lock_timeout=2)
    finally:
        os.umask(old)
    assert result.rotated
    for directory in (tmp_path / "a", tmp_path / "a" / "b", sessions, sessions / "archive"):
        assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700, directory


def test_repair_and_rotation_keep_the_session_mode(tmp_path: Path) -> None:
    path = damaged(tmp_path / "sessions")
    os.chmod(path, 0o644)
    assert repair(path, lock_timeout=2).changed
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    rotatable = make_rotatable(tmp_path / "other")
    os.chmod(rotatable, 0o640)
    result = rotate(rotatable, lock_timeout=2)
    assert result.rotated
    assert stat.S_IMODE(os.stat(result.successor or "").st_mode) == 0o640
    assert stat.S_IMODE(os.stat(result.archive or "").st_mode) == 0o640
    assert stat.S_IMODE(os.stat(path + ".quarantine").st_mode) == 0o600


def test_temps_left_under_the_fixed_names_of_earlier_versions_are_removed(
        tmp_path: Path) -> None:
    """Earlier versions wrote their backup and compression temps under fixed names; a crash
    left them for good. The next open removes them (regular files only, never a link)."""
    path = make_rotatable(tmp_path)
    name = os.path.basename(path)
    archive = tmp_path / "archive"
    archive.mkdir()
    backup_temp = Path(path + ".bak.tmp")
    backup_temp.write_bytes(b"x" * 1000)
    gz_temp = archive / (name + ".gz.tmp")
    gz_temp.write_bytes(b"y" * 1000)
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.write_text("keep me")
    linked = archive / (name + ".2.gz.tmp")
    linked.symlink_to(outside)
    with Session.open(path) as s:
        s.append_message(user("after the crash"))
    assert not backup_temp.exists() and not gz_temp.exists()
    assert linked.is_symlink() and outside.read_text() == "keep me"


def test_a_huge_quarantined_range_is_written_whole_and_read_back_exactly(tmp_path: Path) -> None:
    """A range past the text limit keeps only its exact bytes (base64, written a block at a
    time); a small one keeps a readable copy too."""
    from journal.quarantine import B64_BLOCK, TEXT_LIMIT, Quarantined, quarantine

    session = tmp_path / "s.jsonl"
    session.write_bytes(b"")
    huge = random.Random(3).randbytes(2 * B64_BLOCK + 7)
    small = "a small r\u00e9sum\u00e9".encode()
    quarantine(str(session), [Quarantined(str(session), 10, huge, "invalid_json"),
                              Quarantined(str(session), 20, small, "torn_tail")])
    records = list(read_quarantine(str(session) + ".quarantine"))
    assert [r["data"] for r in records] == [huge, small]
    assert "text" not in records[0] and len(huge) > TEXT_LIMIT
    assert records[1]["text"] == small.decode()
    assert [r["length"] for r in records] == [len(huge), len(small)]


def test_archive_folder_swapped_for_a_link_before_compression_sends_nothing_out(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Compression runs after the lock is released; `archive/` swapped for a link to another
    folder by then must not receive (or send out) anything."""
    import journal.rotation as rotation

    path = make_rotatable(tmp_path / "sessions")
    archive = tmp_path / "sessions" / "archive"
    outside = tmp_path / "outside"
    outside.mkdir()

    def swap(step: str) -> None:
        if step == "done":
            archive.rename(tmp_path / "sessions" / "kept")
            archive.symlink_to(outside)

    monkeypatch.setattr(rotation, "step_hook", swap)
    result = rotate(path)
    assert result.rotated and result.warnings, result
    assert list(outside.iterdir()) == []
    assert [p.name for p in (tmp_path / "sessions" / "kept").iterdir()
            if p.name.endswith(".jsonl")] == [os.path.basename(path)]


def test_archive_folder_swapped_for_a_link_while_archiving_sends_nothing_out(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    lineage_module = importlib.import_module("journal.lineage")  # not the function
    path = make_rotatable(tmp_path / "sessions")
    archive = tmp_path / "sessions" / "archive"
    outside = tmp_path / "outside"
    outside.mkdir()
    checked = lineage_module.ensure_archive_folder

    def check_then_swap(session: str, folder: str) -> None:
        checked(session, folder)  # the folder is fine when checked, then swapped
        archive.rename(tmp_path / "sessions" / "kept")
        archive.symlink_to(outside)

    monkeypatch.setattr(lineage_module, "ensure_archive_folder", check_then_swap)
    result = rotate(path, compress=False)
    # sealed, so rotated; the move is refused and the sealed file stays where it was
    assert result.rotated and result.archive is None and result.warnings, result
    assert "symbolic link" in result.warnings[0]
    assert list(outside.iterdir()) == []
    assert os.path.exists(path) and resolve_live(path)[0] == result.successor


def test_commands_on_a_read_only_file_system_name_the_file_in_one_line(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "ro", "1m") as mnt:
        path = damaged(mnt)
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        script = "import sys; from journal.cli import main; sys.exit(main(sys.argv[1:]))"
        for command in ("repair", "rotate"):
            result = child(script, command, path, timeout=20)
            assert result.returncode == 2, result.stderr
            expected = (f"Error: {path}: cannot rotate: " if command == "rotate"
                        else f"Error: {path}.lock: Read-only file system")
            assert result.stderr.startswith(expected), (command, result.stderr)
            assert result.stderr.count("\n") == 1 and "ead-only file system" in result.stderr
            assert "Errno" not in result.stderr


def test_a_rotation_on_a_full_disk_reports_the_space_there_was(small_tmpfs: Path) -> None:
    """Free space is measured before the write: after a partial write the disk reads as full,
    and "0 bytes free" sent users looking for space that a smaller file would have fit in."""
    sessions = small_tmpfs / "sessions"
    with Session.create(sessions, cwd="/proj") as s:
        for i in range(4):
            s.append_message(user(f"old {i} " + noise(20_000, i)))
        kept = s.append_message(user("kept " + noise(40_000, 9)))
        s.append_compaction("summary", kept, 1000)
        path = s.path
    fill(small_tmpfs, 24 * 1024)
    free_before = os.statvfs(small_tmpfs).f_bavail * os.statvfs(small_tmpfs).f_frsize
    with pytest.raises(NoSpace) as caught:
        rotate(path, lock_timeout=2)
    assert caught.value.available is not None and caught.value.available > 0
    assert caught.value.available <= free_before and caught.value.needed > 40_000
