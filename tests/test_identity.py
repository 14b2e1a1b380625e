"""Identity by file, not by name (issue 11, items 1, 2, 4 (intents), 5 and 11).

A session is its real file: links are resolved once at every entry point, the writer lock sits
beside the real file, successor and archive pointers are relative to the session's folder and
checked against the identity of the file they reach, rotation intents are validated before
anything acts on them, and a writer or reader that finds its file rotated away follows it.
Processes are real (`sys.executable`), links and hard links are real.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

import journal.view
from journal import Session, View, load
from journal.cli import main
from journal.errors import JournalError, UnsafeLockFile
from journal.lineage import ARCHIVE_DIR, INTENT_SUFFIX, lineage, resolve_live, seal_of
from journal.lock import lock_path_for
from journal.repair import repair
from journal.rotation import rotate

REPO = Path(__file__).resolve().parents[1]


def user(text: str) -> dict:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


def assistant(text: str) -> dict:
    return {"role": "assistant", "content": [{"type": "text", "text": text}],
            "provider": "anthropic", "model": "m1", "stopReason": "stop", "timestamp": 2}


def compacted(folder: Path, name: str = "s.jsonl") -> str:
    """A closed session with a compaction, so that it rotates; returns its path."""
    with Session.create(folder / name, cwd="/proj") as s:
        ids = [s.append_message(user(f"q{i} " + "x" * 3000)) for i in range(6)]
        s.append_message(assistant("answer"))
        s.append_compaction("summary", ids[4], 1000)
        s.append_message(user("after"))
        s.append_message(assistant("final"))
        return s.path


def texts(path: str) -> list[str]:
    out = []
    for e in load(path).entries:
        content = e.get("message", {}).get("content")
        if isinstance(content, list):
            out.append(content[0]["text"])
    return out


def snapshot_bytes(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink()}


def run_python(code: str, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env=env, timeout=timeout)


# item 1: one lock per file, whatever its name


def test_a_link_to_the_session_shares_its_writer_lock(tmp_path: Path) -> None:
    real = compacted(tmp_path)
    link = tmp_path / "link.jsonl"
    link.symlink_to("s.jsonl")
    assert lock_path_for(str(link)) == lock_path_for(real) == real + ".lock"
    code = ("import sys\nfrom journal import Session, LockTimeout\n"
            "try:\n    Session.open(sys.argv[1], lock_timeout=0.3)\n"
            "except LockTimeout as e:\n    print('timeout', e.path)\nelse:\n    print('opened')\n")
    with Session.open(real) as holder:
        acked = holder.append_message(user("acknowledged turn"))
        other = run_python(code, str(link))
        assert other.stdout.split() == ["timeout", real], other.stderr
        assert holder.leaf_id == acked
    with Session.open(link) as s:
        assert s.path == real and s.leaf_id == acked


def test_two_names_of_one_session_never_write_at_once(tmp_path: Path) -> None:
    """The reproduction: a second writer through the link waited instead of writing, so the
    first writer's acknowledged turn stays on the active branch."""
    real = compacted(tmp_path)
    (tmp_path / "link.jsonl").symlink_to(real)
    code = ("import sys\nfrom journal import Session\n"
            "with Session.open(sys.argv[1], lock_timeout=5) as s:\n"
            "    s.append_message({'role': 'user', 'content': 'second', 'timestamp': 3})\n")
    with Session.open(real) as first:
        proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "link.jsonl")],
                                env={**os.environ, "PYTHONPATH": str(REPO)})
        time.sleep(1.0)  # the second writer is waiting for the lock by now
        acked = first.append_message(user("first writer's turn"))
    assert proc.wait(timeout=30) == 0
    entries = load(real).entries
    assert entries[-1]["parentId"] == acked, "the second writer continued after the first"


@pytest.mark.parametrize("plant", ["symlink", "hardlink", "fifo"])
def test_a_planted_lock_file_is_refused_and_nothing_is_written_through_it(
        tmp_path: Path, plant: str) -> None:
    real = compacted(tmp_path / "sessions")
    outside = tmp_path / "victim.txt"
    outside.write_text("precious\n")
    lock = Path(real + ".lock")
    if lock.exists():
        lock.unlink()
    if plant == "symlink":
        lock.symlink_to(outside)
    elif plant == "hardlink":
        os.link(outside, lock)
    else:
        os.mkfifo(lock)
    before = Path(real).read_bytes()
    with pytest.raises(UnsafeLockFile) as caught:
        Session.open(real, lock_timeout=0.5)
    assert caught.value.path == str(lock) and "Remove it" in str(caught.value)
    assert outside.read_text() == "precious\n"
    assert Path(real).read_bytes() == before


def test_cli_reports_a_planted_lock_link_in_one_line(tmp_path: Path, capsys) -> None:
    real = compacted(tmp_path)
    lock = Path(real + ".lock")
    lock.unlink(missing_ok=True)
    lock.symlink_to(tmp_path / "elsewhere")
    assert main(["rotate", real]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("Error: ") and "symbolic link" in err[0]
    assert not (tmp_path / "elsewhere").exists()


# item 2: a copied folder is self-contained


def rotated_folder(tmp_path: Path) -> tuple[Path, str, str]:
    orig = tmp_path / "orig"
    old = compacted(orig)
    result = rotate(old, compress=False)
    assert result.rotated and result.successor
    return orig, os.path.basename(old), os.path.basename(result.successor)


def test_a_copied_folder_writes_into_the_copy(tmp_path: Path) -> None:
    orig, old_name, new_name = rotated_folder(tmp_path)
    copy = tmp_path / "copy"
    shutil.copytree(orig, copy)
    untouched = snapshot_bytes(orig)
    with Session.open(copy / old_name) as s:
        assert s.path == str(copy / new_name)
        s.append_message(user("written in the copy"))
    assert texts(str(copy / new_name))[-1] == "written in the copy"
    assert snapshot_bytes(orig) == untouched
    assert resolve_live(str(copy / ARCHIVE_DIR / old_name))[0] == str(copy / new_name)
    assert lineage(str(copy / old_name)) == [str(copy / ARCHIVE_DIR / old_name),
                                             str(copy / new_name)]


def test_retention_in_a_copy_never_deletes_the_original_archives(tmp_path: Path) -> None:
    orig, old_name, new_name = rotated_folder(tmp_path)
    copy = tmp_path / "copy"
    shutil.copytree(orig, copy)
    shutil.rmtree(copy / ARCHIVE_DIR)  # the copy lost its archive; the original keeps its own
    untouched = snapshot_bytes(orig)
    with Session.open(copy / new_name) as s:
        ids = [s.append_message(user(f"more {i} " + "y" * 3000)) for i in range(6)]
        s.append_compaction("summary 2", ids[4], 2000)
        s.append_message(user("end"))
    result = rotate(copy / new_name, keep=0, compress=False)
    assert result.rotated
    assert snapshot_bytes(orig) == untouched
    assert all(str(copy) in p for p in lineage(result.successor or ""))


def test_a_moved_folder_keeps_working(tmp_path: Path) -> None:
    orig, old_name, new_name = rotated_folder(tmp_path)
    moved = tmp_path / "moved"
    orig.rename(moved)
    with Session.open(moved / old_name) as s:
        assert s.path == str(moved / new_name)
    assert lineage(str(moved / new_name)) == [str(moved / ARCHIVE_DIR / old_name),
                                              str(moved / new_name)]


def main_style(folder: Path, old_name: str, new_name: str) -> None:
    """Rewrite a rotated pair as the previous version wrote it: absolute `successor` in the
    seal (no `fromArchive`), absolute `parentSession` in the successor's header."""
    archived = folder / ARCHIVE_DIR / old_name
    lines = archived.read_bytes().splitlines(keepends=True)
    seal = orjson.loads(lines[-1])
    seal["data"] = {"successor": str(folder / new_name), "file": new_name,
                    "sessionId": seal["data"]["sessionId"]}
    archived.write_bytes(b"".join(lines[:-1]) + orjson.dumps(seal) + b"\n")
    live = folder / new_name
    lines = live.read_bytes().splitlines(keepends=True)
    header = orjson.loads(lines[0])
    header["parentSession"] = str(archived)
    live.write_bytes(orjson.dumps(header) + b"\n" + b"".join(lines[1:]))


def test_absolute_pointers_of_older_files_are_followed_where_they_were_written(
        tmp_path: Path) -> None:
    orig, old_name, new_name = rotated_folder(tmp_path)
    main_style(orig, old_name, new_name)
    archived = str(orig / ARCHIVE_DIR / old_name)
    assert resolve_live(str(orig / old_name))[0] == str(orig / new_name)
    assert resolve_live(archived)[0] == str(orig / new_name)
    assert lineage(archived) == [archived, str(orig / new_name)]
    with Session.open(orig / old_name) as s:
        assert s.path == str(orig / new_name)


def test_absolute_pointers_of_older_files_never_lead_out_of_a_copy(tmp_path: Path) -> None:
    orig, old_name, new_name = rotated_folder(tmp_path)
    main_style(orig, old_name, new_name)
    copy = tmp_path / "copy"
    shutil.copytree(orig, copy)
    untouched = snapshot_bytes(orig)
    for start in (copy / old_name, copy / ARCHIVE_DIR / old_name):
        assert resolve_live(str(start))[0] == str(copy / new_name)
    with Session.open(copy / old_name) as s:
        s.append_message(user("copy only"))
    assert snapshot_bytes(orig) == untouched
    assert lineage(str(copy / new_name)) == [str(copy / ARCHIVE_DIR / old_name),
                                             str(copy / new_name)]
    (copy / new_name).unlink()  # the copy's successor is gone: never fall back on orig's
    assert not resolve_live(str(copy / old_name))[0].startswith(str(orig))


# item 4 (intents): a planted intent is validated, reported and ignored


def plant_intent(session: str, intent: dict) -> Path:
    path = Path(session + INTENT_SUFFIX)
    path.write_bytes(orjson.dumps(intent))
    return path


def test_a_planted_intent_with_absolute_paths_changes_nothing(tmp_path: Path, caplog) -> None:
    real = compacted(tmp_path / "sessions")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "successor.jsonl").write_text('{"type":"session","version":3,"id":"x"}\n')
    (outside / "doomed").write_text("deleted on main\n")
    (outside / "overwritten").write_text("replaced by the session on main\n")
    planted = plant_intent(real, {"successor": str(outside / "successor.jsonl"),
                                  "temp": str(outside / "doomed"),
                                  "archive": str(outside / "overwritten"), "sessionId": "x"})
    before = snapshot_bytes(outside)
    session_before = Path(real).read_bytes()
    with caplog.at_level(logging.WARNING, logger="journal.lineage"), Session.open(real) as s:
        assert s.path == real
        s.append_message(user("still here"))
    assert snapshot_bytes(outside) == before
    assert Path(real).read_bytes().startswith(session_before)
    assert seal_of(real) is None and not planted.exists()
    assert any("ignored the rotation intent" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("change", ["wrong-session-id", "other-session-archive", "temp-elsewhere",
                                    "archive-outside", "successor-is-a-link", "not-json"])
def test_an_intent_that_this_rotation_cannot_have_written_is_ignored(
        tmp_path: Path, change: str) -> None:
    folder = tmp_path / "sessions"
    real = compacted(folder)
    other = compacted(folder, "other.jsonl")
    header = orjson.loads(Path(other).read_bytes().splitlines()[0])
    # absolute paths, as older versions wrote them (each would be acted on before the fix)
    intent = {"successor": other, "temp": str(folder / ".other.jsonl.rotate.tmp"),
              "archive": str(folder / "archive" / "s.jsonl"), "sessionId": header["id"]}
    if change == "wrong-session-id":
        intent["sessionId"] = "not-the-successor"
    elif change == "other-session-archive":
        intent["archive"] = str(folder / "archive" / "other.jsonl")
    elif change == "temp-elsewhere":
        intent["temp"] = other
    elif change == "archive-outside":
        intent["archive"] = str(tmp_path / "s.jsonl")
    elif change == "successor-is-a-link":
        (folder / "linked.jsonl").symlink_to(other)
        intent["successor"] = str(folder / "linked.jsonl")
        intent["temp"] = str(folder / ".linked.jsonl.rotate.tmp")
    planted = plant_intent(real, intent)
    if change == "not-json":
        planted.write_bytes(b'{"successor": "other.js')
    before = snapshot_bytes(folder)
    with Session.open(real) as s:
        assert s.path == real
    after = snapshot_bytes(folder)
    assert after.pop("s.jsonl.rotating", None) is None and not planted.exists()
    before.pop("s.jsonl.rotating", None)
    assert {k: v for k, v in after.items() if not k.endswith(".lock")} == {
        k: v for k, v in before.items() if not k.endswith(".lock")}
    assert not (tmp_path / "s.jsonl").exists()


def test_readers_do_not_follow_a_planted_intent(tmp_path: Path) -> None:
    real = compacted(tmp_path / "sessions")
    outside = tmp_path / "elsewhere.jsonl"
    shutil.copyfile(real, outside)
    plant_intent(real, {"successor": str(outside), "temp": None, "archive": None,
                        "sessionId": orjson.loads(outside.read_bytes().splitlines()[0])["id"]})
    assert resolve_live(real)[0] == real
    assert View.open(real).path == real


def crash_after_publishing(path: str, monkeypatch: pytest.MonkeyPatch, at: str = "published",
                           archive_dir: str | None = None) -> None:
    import journal.rotation as rotation

    def hook(step: str) -> None:
        if step == at:
            raise KeyboardInterrupt("simulated crash")

    monkeypatch.setattr(rotation, "step_hook", hook)
    with pytest.raises(KeyboardInterrupt):
        rotate(path, compress=False, archive_dir=archive_dir)
    monkeypatch.setattr(rotation, "step_hook", None)


@pytest.mark.parametrize("at", ["temp", "published"])
def test_an_interrupted_rotation_into_an_archive_folder_elsewhere_is_recovered_inside(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, at: str) -> None:
    folder, elsewhere = tmp_path / "sessions", tmp_path / "kept"
    real = compacted(folder)
    crash_after_publishing(real, monkeypatch, at, str(elsewhere))
    with Session.open(real) as s:
        live = s.path
    assert not any(p.name.endswith(".rotate.tmp") for p in folder.iterdir())
    if at == "temp":
        assert live == real and seal_of(real) is None
    else:
        # a recovery never moves a file out of its folder (the intent may have been
        # planted): it archives into the default folder, which lineage reads as well
        archived = str(folder / ARCHIVE_DIR / "s.jsonl")
        assert live != real and seal_of(archived) is not None
        assert not elsewhere.exists() or not any(elsewhere.iterdir())
        assert lineage(live) == [archived, live]


def test_an_interrupted_rotation_is_still_finished_from_its_relative_intent(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = compacted(tmp_path / "sessions")
    crash_after_publishing(real, monkeypatch)
    intent = orjson.loads(Path(real + INTENT_SUFFIX).read_bytes())
    assert not any(os.path.isabs(intent[k]) for k in ("successor", "temp", "archive"))
    with Session.open(real) as s:
        live = s.path
    assert live != real and not os.path.exists(real)
    assert seal_of(str(tmp_path / "sessions" / ARCHIVE_DIR / "s.jsonl")) is not None


def test_an_older_absolute_intent_is_finished_where_it_was_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "sessions"
    real = compacted(folder)
    crash_after_publishing(real, monkeypatch)
    intent_file = Path(real + INTENT_SUFFIX)
    intent = orjson.loads(intent_file.read_bytes())
    intent_file.write_bytes(orjson.dumps({
        "successor": str(folder / intent["successor"]), "temp": str(folder / intent["temp"]),
        "archive": str(folder / intent["archive"]), "sessionId": intent["sessionId"]}))
    with Session.open(real) as s:
        assert s.path == str(folder / intent["successor"])
    assert os.path.exists(folder / ARCHIVE_DIR / "s.jsonl") and not intent_file.exists()


def test_an_older_intent_written_through_a_linked_folder_is_finished(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "sessions"
    real = compacted(folder)
    (tmp_path / "via").symlink_to(folder)
    crash_after_publishing(real, monkeypatch)
    intent_file = Path(real + INTENT_SUFFIX)
    intent = orjson.loads(intent_file.read_bytes())
    via = tmp_path / "via"
    intent_file.write_bytes(orjson.dumps({
        "successor": str(via / intent["successor"]), "temp": str(via / intent["temp"]),
        "archive": str(via / intent["archive"]), "sessionId": intent["sessionId"]}))
    with Session.open(via / "s.jsonl") as s:
        assert s.path == str(folder / intent["successor"])
    assert os.path.exists(folder / ARCHIVE_DIR / "s.jsonl") and not intent_file.exists()


# item 5: repair and rotate through a link act on the real file; the link stays a link


def test_repair_through_a_link_repairs_the_real_file(tmp_path: Path) -> None:
    real = compacted(tmp_path)
    link = tmp_path / "link.jsonl"
    link.symlink_to("s.jsonl")
    with open(real, "ab") as f:
        f.write(b'{"type":"message","id":"torn"\n')
    report = repair(str(link))
    assert report.changed and report.path == real
    assert link.is_symlink() and os.readlink(link) == "s.jsonl"
    assert load(real).diagnostics == [] and load(str(link)).diagnostics == []
    assert report.backup == real + ".bak" and not os.path.lexists(str(link) + ".bak")


def test_rotate_through_a_link_archives_the_real_file(tmp_path: Path) -> None:
    real = compacted(tmp_path)
    link = tmp_path / "link.jsonl"
    link.symlink_to("s.jsonl")
    result = rotate(str(link), compress=False)
    assert result.rotated and result.path == real and result.successor
    archived = tmp_path / ARCHIVE_DIR / "s.jsonl"
    assert archived.is_file() and not archived.is_symlink() and seal_of(str(archived))
    assert not os.path.lexists(tmp_path / ARCHIVE_DIR / "link.jsonl")
    with Session.open(link) as s:
        assert s.path == result.successor
    assert View.open(link).path == result.successor
    assert lineage(str(link)) == [str(archived), result.successor]


def test_create_never_writes_through_a_link_at_the_new_name(tmp_path: Path) -> None:
    target = tmp_path / "outside.jsonl"
    (tmp_path / "sessions").mkdir()
    (tmp_path / "sessions" / "new.jsonl").symlink_to(target)
    with pytest.raises(JournalError, match="already exists"):
        Session.create(tmp_path / "sessions" / "new.jsonl")
    assert not target.exists() and not Path(str(target) + ".lock").exists()


# item 11: a writer or reader that finds its file rotated away follows it


ROTATE_WAITER = """
import sys
from journal.cli import main
sys.exit(main(["rotate", sys.argv[1], "--lock-timeout", "30"]))
"""


def test_rotate_waiting_for_a_rotating_holder_follows_the_successor(tmp_path: Path) -> None:
    real = compacted(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with Session.open(real) as holder:
        waiter = subprocess.Popen([sys.executable, "-c", ROTATE_WAITER, real], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(1.5)  # the waiter has resolved the old file and waits for its lock
        result = holder.rotate(compress=False)
        assert result.rotated
        successor = holder.path
    out, err = waiter.communicate(timeout=60)
    assert waiter.returncode == 0, err
    assert "Error" not in err and successor in out


def test_view_open_follows_a_rotation_that_happens_while_it_reads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = compacted(tmp_path)
    real_resume = journal.view.resume
    rotated: list[str] = []

    def resume_then_rotate(path: str):  # another process rotates right after our read
        snap = real_resume(path)
        if not rotated:
            result = rotate(path, compress=False)
            rotated.append(result.successor or "")
        return snap

    monkeypatch.setattr(journal.view, "resume", resume_then_rotate)
    view = View.open(real)
    assert view.path == rotated[0]
    last = [m["content"][0]["text"] for m in view.context().messages[-2:]]
    assert last == ["after", "final"]


def test_view_open_of_a_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    from journal.errors import NotASession

    with pytest.raises(NotASession, match="no such file"):
        View.open(tmp_path / "missing.jsonl")
    assert list(tmp_path.iterdir()) == []


def test_opening_a_missing_session_leaves_no_lock_file(tmp_path: Path) -> None:
    from journal.errors import NotASession

    with pytest.raises(NotASession):
        Session.open(tmp_path / "missing.jsonl")
    with pytest.raises(NotASession, match="directory"):
        Session.open(tmp_path)
    assert list(tmp_path.iterdir()) == []


# tail: a link is followed to the real file, and rotation from there


def test_tail_through_a_link_in_another_folder_follows_the_rotation(tmp_path: Path) -> None:
    import threading

    from journal.tail import follow_events

    real = compacted(tmp_path / "sessions")
    elsewhere = tmp_path / "links"
    elsewhere.mkdir()
    (elsewhere / "current.jsonl").symlink_to(real)
    stop = threading.Event()
    seen: list[tuple[str, str]] = []

    def run() -> None:
        for event in follow_events(elsewhere / "current.jsonl", stop=stop, poll=True,
                                   timeout=0.05, grace=5):
            if event.kind == "entry" and event.entry is not None:
                seen.append((event.path, event.entry["id"]))

    reader = threading.Thread(target=run)
    reader.start()
    try:
        time.sleep(0.3)
        with Session.open(real) as s:
            s.rotate(compress=False)
            successor = s.path
            fresh = s.append_message(user("after the rotation"))
        deadline = time.monotonic() + 10
        while (successor, fresh) not in seen and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        reader.join(timeout=10)
    assert (successor, fresh) in seen


def test_repair_of_a_rotated_name_repairs_the_file_that_continues_it(tmp_path: Path) -> None:
    real = compacted(tmp_path)
    result = rotate(real, compress=False)
    assert result.successor
    with open(result.successor, "ab") as f:
        f.write(b'{"type":"message","id":"torn"\n')
    report = repair(real)
    assert report.path == result.successor and report.changed
    assert load(result.successor).diagnostics == []


def test_rotate_searches_again_when_the_file_was_replaced_while_it_waited(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The session name found before the lock belongs to the file as it was then; a file
    replaced meanwhile (a repair, say) is searched again under the lock."""
    import journal.rotation as rotation

    with Session.create(tmp_path / "s.jsonl", cwd="/proj") as s:
        s.append_session_info("name-A")
        ids = [s.append_message(user(f"q{i} " + "x" * 3000)) for i in range(6)]
        s.append_compaction("summary", ids[4], 1000)
        s.append_message(user("after"))
        real = s.path
    real_lock_live = rotation.lock_live

    def replaced_while_waiting(path: str, timeout: float, **kw: bool):
        data = Path(path).read_bytes().replace(b"name-A", b"name-B")
        Path(path + ".new").write_bytes(data)
        os.replace(path + ".new", path)
        return real_lock_live(path, timeout, **kw)

    monkeypatch.setattr(rotation, "lock_live", replaced_while_waiting)
    result = rotate(real, compress=False)
    assert result.rotated and result.successor
    names = [e.get("name") for e in load(result.successor).entries
             if e["type"] == "session_info"]
    assert names == ["name-B"]


# a hard link is a second name the writer lock cannot cover


def test_a_hard_linked_session_is_never_written_through_either_name(tmp_path: Path) -> None:
    path = compacted(tmp_path)
    hard = tmp_path / "hard.jsonl"
    os.link(path, hard)
    before = snapshot_bytes(tmp_path)
    for name in (path, str(hard)):
        with pytest.raises(JournalError, match="other name"):
            Session.open(name, lock_timeout=1)
        with pytest.raises(JournalError, match="other name"):
            rotate(name, lock_timeout=1)
        with pytest.raises(JournalError, match="other name"):
            repair(name, lock_timeout=1)
    assert main(["append", str(hard)]) == 2
    after = snapshot_bytes(tmp_path)
    assert {k: v for k, v in after.items() if not k.endswith(".lock")} == {
        k: v for k, v in before.items() if not k.endswith(".lock")}


def test_repair_of_a_folder_takes_a_hard_linked_session_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`journal repair DIR` takes a file under two names once, under the first name met
    (`journal.identity.first_names`): checked once, and refused once."""
    path = compacted(tmp_path, "b.jsonl")
    os.link(path, tmp_path / "a.jsonl")
    before = snapshot_bytes(tmp_path)
    assert main(["repair", "--check", "--json", str(tmp_path)]) == 0
    reports = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["path"] for r in reports] == [str(tmp_path / "a.jsonl")]
    assert main(["repair", str(tmp_path), str(tmp_path / "b.jsonl")]) == 2
    errors = capsys.readouterr().err.splitlines()
    assert len(errors) == 1 and "other name(s)" in errors[0], errors
    assert errors[0].startswith(f"Error: {tmp_path / 'a.jsonl'}:")
    after = snapshot_bytes(tmp_path)
    assert {k: v for k, v in after.items() if not k.endswith(".lock")} == before


def test_a_link_made_while_a_writer_holds_the_session_cannot_rotate_it_away(
        tmp_path: Path) -> None:
    """The reproduction: a writer holds the session, another process rotates it through a
    hard link it made; the writer's acknowledged turn must stay in the live session."""
    path = compacted(tmp_path)
    with Session.open(path) as writer:
        os.link(path, tmp_path / "hard.jsonl")
        with pytest.raises(JournalError, match="other name"):
            rotate(str(tmp_path / "hard.jsonl"), lock_timeout=1)
        writer.append_message(user("ACKED TURN"))
    live = resolve_live(path)[0]
    assert live == path and "ACKED TURN" in texts(live)


def test_a_backup_left_as_a_second_name_by_a_crashed_repair_is_not_another_writer(
        tmp_path: Path) -> None:
    """Repair makes `<file>.bak` a second name of the file until it swaps the new one in; a
    crash in between leaves both names on one file, which must stay writable."""
    path = compacted(tmp_path)
    os.link(path, path + ".bak")
    with Session.open(path) as s:
        s.append_message(user("after the crash"))
    assert rotate(path).rotated


# planted intents that name a real-looking successor


def _plant(real: str, successor: Path, session_id: str, archive: str) -> None:
    Path(real + INTENT_SUFFIX).write_bytes(orjson.dumps(
        {"successor": successor.name, "sessionId": session_id, "archive": archive}))


def test_a_planted_intent_and_successor_never_move_the_session_out(tmp_path: Path) -> None:
    """The reviewer's reproduction: a planted successor whose header names an outside
    archive as its parent, and an intent naming both."""
    folder, outside = tmp_path / "sessions", tmp_path / "attacker"
    real = compacted(folder)
    outside.mkdir()
    header = orjson.loads(Path(real).read_bytes().splitlines()[0])
    fid = "01a00000-0000-7000-8000-00000000beef"
    planted = folder / f"2099-01-01T00-00-00-000Z_{fid}.jsonl"
    planted.write_bytes(orjson.dumps({**header, "id": fid,
                                      "parentSession": str(outside / "s.jsonl.gz")}) + b"\n")
    _plant(real, planted, fid, str(outside / "s.jsonl"))
    with Session.open(real) as s:
        assert s.path == real
        s.append_message(user("private turn"))
    assert list(outside.iterdir()) == []
    assert "private turn" in texts(real) and "private turn" not in planted.read_text()
    assert not Path(real + INTENT_SUFFIX).exists()


def test_a_planted_intent_naming_another_session_changes_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "sessions"
    a = compacted(folder, "a.jsonl")
    b = compacted(folder, "b.jsonl")
    b_id = orjson.loads(Path(b).read_bytes().splitlines()[0])["id"]
    before = Path(b).read_bytes()
    _plant(a, Path(b), b_id, "archive/a.jsonl")
    assert resolve_live(a)[0] == a, "a reader followed the planted intent"
    with Session.open(a) as s:
        assert s.path == a
        s.append_message(user("turn for a"))
    assert Path(b).read_bytes() == before and seal_of(a) is None
    assert "turn for a" in texts(a)


def test_a_fork_is_never_taken_for_the_successor_of_a_rotated_file(tmp_path: Path) -> None:
    """With the archive gone (pruned), the old name is followed by the header of its
    successor; a fork of the old file (whose header names the file itself, as pi writes it)
    sorting first must not be taken for it."""
    folder = tmp_path / "sessions"
    real = compacted(folder, "m.jsonl")
    with Session.create(folder / "0-fork.jsonl", cwd="/proj", parent_session=real) as fork:
        fork.append_message(user("in the fork"))
    successor = rotate(real).successor
    assert successor is not None
    shutil.rmtree(folder / ARCHIVE_DIR)
    assert resolve_live(real)[0] == successor
    with Session.open(real) as s:
        assert s.path == successor


def test_a_file_planted_at_the_archive_name_leaves_the_old_name_usable(tmp_path: Path) -> None:
    """Rotation archives under `<name>.2` when `archive/<name>` is taken (here by a planted
    file); the old name must still lead to the successor."""
    folder = tmp_path / "sessions"
    real = compacted(folder)
    (folder / ARCHIVE_DIR).mkdir(mode=0o700)
    (folder / ARCHIVE_DIR / "s.jsonl").write_text("planted\n")
    result = rotate(real)
    assert result.rotated and result.archive is not None and ".2" in result.archive
    assert resolve_live(real)[0] == result.successor
    with Session.open(real) as s:
        assert s.path == result.successor
