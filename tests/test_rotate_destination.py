"""A rotation never jams a session (issue 13, item 1).

Its destination is checked before anything changes, by the rotation and its `--dry-run` alike;
a rotation that fails rolls back; an interrupted rotation that cannot be finished never blocks
appends to the live file. Every case ends with appends through `Session` and through `journal
append`, and with a rotation that works.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from mounts import tmpfs

from journal import Session, load
from journal.errors import JournalError
from journal.lineage import INTENT_SUFFIX, resolve_live

rotation = importlib.import_module("journal.rotation")
lineage_module = importlib.import_module("journal.lineage")
ROOT = Path(__file__).resolve().parents[1]


class InjectedFailure(Exception):
    pass


def user(text: str) -> dict:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


def make_rotatable(folder: Path) -> str:
    with Session.create(folder, cwd="/proj") as s:
        for i in range(8):
            s.append_message(user(f"old {i} " + "x" * 600))
        kept = s.append_message(user("kept"))
        s.append_compaction("summary", kept, 100)
        s.append_message(user("after the compaction"))
        return s.path


def journal(tmp_path: Path, *argv: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "journal.cli", *argv], input=stdin,
                          capture_output=True, text=True, env=env, timeout=60)


def listing(folder: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for p in sorted(folder.rglob("*")):
        if p.is_symlink():
            out[str(p.relative_to(folder))] = "link -> " + os.readlink(p)
        elif p.is_file():
            out[str(p.relative_to(folder))] = hashlib.sha256(p.read_bytes()).hexdigest()
        else:
            out[str(p.relative_to(folder))] = "other"
    return out


def assert_one_error(done: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr.startswith("Error: ") and done.stderr.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr
    for needle in needles:
        assert needle in done.stderr, done.stderr


def assert_writable_and_rotatable(tmp_path: Path, path: str) -> None:
    """Appends go on through Session and the command, and a later rotation works."""
    with Session.open(path, lock_timeout=5) as s:
        live = s.path
        for i in range(6):  # and something for the next rotation to leave behind
            s.append_message(user(f"more {i} " + "y" * 600))
        first = s.append_message(user("through Session"))
        s.append_compaction("summary again", first, 100)
    appended = journal(tmp_path, "append", path, "--json",
                       stdin='{"role":"user","content":"through journal append","timestamp":1}\n')
    assert appended.returncode == 0, appended.stderr
    ids = [e["id"] for e in load(live).entries]
    assert first in ids and ids[-1] != first
    done = journal(tmp_path, "rotate", path, "--json")
    assert done.returncode == 0, done.stderr
    result = orjson.loads(done.stdout)
    assert result["rotated"] and not result["warnings"], result
    assert resolve_live(path)[0] == result["successor"]
    folder = Path(live).parent
    assert not list(folder.glob("*" + INTENT_SUFFIX)) and not list(folder.glob("*.lock"))


def regular_file(tmp_path: Path, sessions: Path) -> Path:
    (sessions / "afile").write_text("not a folder\n")
    return sessions / "afile"


def fifo(tmp_path: Path, sessions: Path) -> Path:
    os.mkfifo(sessions / "pipe")
    return sessions / "pipe"


def dangling_link(tmp_path: Path, sessions: Path) -> Path:
    os.symlink(tmp_path / "nowhere", sessions / "gone")
    return sessions / "gone"


def below_a_file(tmp_path: Path, sessions: Path) -> Path:
    (sessions / "afile").write_text("not a folder\n")
    return sessions / "afile" / "archive"


BAD = {"regular file": (regular_file, "is a regular file, not a folder"),
       "fifo": (fifo, "FIFO"), "dangling link": (dangling_link, "symbolic link to nothing"),
       "below a file": (below_a_file, "Not a directory")}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_archive_folder_is_refused_before_anything_changes(tmp_path: Path,
                                                                  case: str) -> None:
    sessions = tmp_path / "sessions"
    path = make_rotatable(sessions)
    make, needle = BAD[case]
    archive_dir = str(make(tmp_path, sessions))
    before = listing(sessions)
    dry = journal(tmp_path, "rotate", "--dry-run", "--archive-dir", archive_dir, path)
    assert_one_error(dry, "cannot rotate", needle, "nothing was changed")
    assert listing(sessions) == before
    real = journal(tmp_path, "rotate", "--archive-dir", archive_dir, path)
    assert_one_error(real, "cannot rotate", needle)
    assert real.stderr == dry.stderr, "the dry run and the rotation check the same things"
    assert listing(sessions) == before, "a refused rotation created or changed a file"
    assert_writable_and_rotatable(tmp_path, path)


def test_a_read_only_archive_folder_is_refused_before_anything_changes(tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    path = make_rotatable(sessions)
    with tmpfs(tmp_path / "ro", "1m") as mnt:
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        before = listing(sessions)
        for argv in (["--dry-run"], []):
            done = journal(tmp_path, "rotate", *argv, "--archive-dir", str(mnt), path)
            assert_one_error(done, "cannot rotate", "read-only file system")
            assert listing(sessions) == before
        assert_writable_and_rotatable(tmp_path, path)


def test_the_jammed_case_through_an_open_session(tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    path = make_rotatable(sessions)
    (sessions / "afile").write_text("x")
    with Session.open(path) as s:
        with pytest.raises(JournalError, match="cannot rotate"):
            s.rotate(archive_dir=str(sessions / "afile"))
        with pytest.raises(JournalError, match="cannot rotate"):
            s.rotate(archive_dir=str(sessions / "afile"), dry_run=True)
        s.append_message(user("the open session goes on"))
    assert not list(sessions.glob("*" + INTENT_SUFFIX))
    assert_writable_and_rotatable(tmp_path, path)


def failing_at(target: str) -> Callable[..., None]:
    def fail(*args: object, **kwargs: object) -> None:
        raise InjectedFailure(target)
    return fail


def interrupted_at(monkeypatch: pytest.MonkeyPatch, path: str, step: str,
                   **options: object) -> None:
    """Rotate `path`, failing at `step` (one of rotation.STEPS), in this process."""
    def crash(name: str) -> None:
        if name == step:
            raise InjectedFailure(name)

    monkeypatch.setattr(rotation, "step_hook", crash)
    with pytest.raises(InjectedFailure):
        rotation.rotate(path, **options)
    monkeypatch.setattr(rotation, "step_hook", None)


@pytest.mark.parametrize("where", ["publish", "successor lock"])
def test_a_rotation_failing_before_it_publishes_rolls_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    sessions = tmp_path / "sessions"
    path = make_rotatable(sessions)
    before = {k: v for k, v in listing(sessions).items() if k != "archive"}
    session = Session.open(path)
    if where == "publish":
        monkeypatch.setattr(rotation.NewFile, "publish", failing_at(where))
    else:
        monkeypatch.setattr(rotation.WriterLock, "acquire", failing_at(where))
    with pytest.raises(InjectedFailure):
        session.rotate()
    monkeypatch.undo()
    try:
        session.append_message(user("still writing the old file"))
    finally:
        session.close()
    after = {k: v for k, v in listing(sessions).items() if k != "archive"}
    assert set(after) == set(before), "a successor, temp, intent or lock was left behind"
    assert_writable_and_rotatable(tmp_path, path)


def test_an_archive_move_that_fails_after_sealing_finishes_with_a_warning(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sessions = tmp_path / "sessions"
    path = make_rotatable(sessions)
    monkeypatch.setattr(rotation, "move_into_archive", failing_at("move"))
    with pytest.raises(InjectedFailure):  # not an OSError: a bug, not the destination
        rotation.rotate(path)
    monkeypatch.undo()
    assert_writable_and_rotatable(tmp_path, path)

    other = make_rotatable(tmp_path / "other")

    def refuse(*args: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(rotation, "move_into_archive", refuse)
    result = rotation.rotate(other)
    monkeypatch.undo()
    assert result.rotated and result.archive is None
    assert "stays, sealed" in result.warnings[0]
    assert resolve_live(other)[0] == result.successor
    assert not list((tmp_path / "other").glob("*" + INTENT_SUFFIX))
    assert_writable_and_rotatable(tmp_path, other)


def test_an_intent_that_cannot_be_finished_never_blocks_appends(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sessions = tmp_path / "sessions"
    path = make_rotatable(sessions)
    interrupted_at(monkeypatch, path, "published")
    (successor,) = [p for p in sessions.glob("*.jsonl") if str(p) != path]

    def cannot_seal(*args: object) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(lineage_module, "seal_file", cannot_seal)
    with Session.open(path, lock_timeout=5) as s:
        assert s.path == str(successor), "writes go to the successor, which is authoritative"
        new_id = s.append_message(user("appended while the intent is pending"))
    assert new_id in {e["id"] for e in load(str(successor)).entries}
    info = orjson.loads(journal(tmp_path, "info", path, "--json").stdout)
    assert "interrupted rotation" in (info["pendingRotation"] or ""), info
    monkeypatch.undo()
    assert_writable_and_rotatable(tmp_path, path)  # the next writer finishes it


@pytest.mark.parametrize("step", rotation.STEPS)
def test_a_rotation_interrupted_at_each_step_leaves_the_session_writable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str) -> None:
    sessions = tmp_path / "sessions"
    path = make_rotatable(sessions)
    interrupted_at(monkeypatch, path, step)
    monkeypatch.undo()
    # the command first, then Session, then a next rotation (see assert_writable_and_rotatable)
    appended = journal(tmp_path, "append", path,
                       stdin='{"role":"user","content":"first after the crash","timestamp":1}\n')
    assert appended.returncode == 0, appended.stderr
    assert_writable_and_rotatable(tmp_path, path)


def test_journal_repair_clears_a_left_over_intent(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    sessions = tmp_path / "sessions"
    path = make_rotatable(sessions)

    def crash(name: str) -> None:
        if name == "verified":
            raise KeyboardInterrupt  # not rolled back in-process: as a crash leaves it

    monkeypatch.setattr(rotation, "step_hook", crash)
    with pytest.raises(KeyboardInterrupt):
        rotation.rotate(path)
    monkeypatch.undo()
    assert os.path.exists(path + INTENT_SUFFIX)
    done = journal(tmp_path, "repair", path)
    assert done.returncode == 0, done.stderr
    assert not os.path.exists(path + INTENT_SUFFIX)
    assert not [p for p in sessions.iterdir() if p.name.startswith(".")], "temp left"
    assert_writable_and_rotatable(tmp_path, path)


def _header_id(path: str) -> str:
    from journal.lineage import read_header

    header = read_header(path)
    assert header is not None, path
    return str(header["id"])


@pytest.mark.parametrize("where", ["intent", "sealed"])
def test_two_sessions_of_one_name_rotated_at_once_into_one_archive_folder_both_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """Two sessions whose files have the same name (proj-a/s.jsonl, proj-b/s.jsonl), rotated
    at the same moment into one --archive-dir: both pick the same free archive name. The
    second to get there never replaces the first one's archive (found by a reviewer: the
    move and the compression both replaced it): its old file stays, sealed, where it is, or
    is archived under the name, and its lineage still reads it."""
    from journal.lineage import lineage

    paths = []
    for name in ("proj-a", "proj-b"):
        made = make_rotatable(tmp_path / name)
        renamed = str(tmp_path / name / "s.jsonl")
        os.rename(made, renamed)
        paths.append(renamed)
    a, b = paths
    a_id = _header_id(a)
    ids = {a_id, _header_id(b)}
    shared = str(tmp_path / "shared")
    other: list[object] = []

    def b_meanwhile(step: str) -> None:
        if step == where and not other:  # A has picked its archive name
            monkeypatch.setattr(rotation, "step_hook", None)
            other.append(rotation.rotate(b, archive_dir=shared))

    monkeypatch.setattr(rotation, "step_hook", b_meanwhile)
    first = rotation.rotate(a, archive_dir=shared)
    assert other and first.rotated
    archived = [str(p) for p in Path(shared).iterdir() if p.name.startswith("s.jsonl")
                and not p.name.endswith((".bak", ".quarantine"))]
    in_place = [p for p in paths if os.path.exists(p)]
    assert {_header_id(p) for p in archived + in_place} == ids  # nothing lost
    assert first.successor is not None
    chain = lineage(first.successor)
    assert [_header_id(p) for p in chain[:-1]] == [a_id]  # A's successor reads A's old file


def test_a_crash_between_the_archives_link_and_the_old_names_removal_is_finished(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The move into the archive gives the file its archive name first, then drops the old
    name. Killed in between, both names hold the one file: the next open finishes the move
    (it took the archive name for someone else's file before)."""
    from journal.lineage import read_intent

    sessions = tmp_path / "sessions"
    path = make_rotatable(sessions)
    interrupted_at(monkeypatch, path, "sealed", compress=False)
    intent = read_intent(path)
    assert intent is not None and intent.archive is not None
    os.makedirs(os.path.dirname(intent.archive), exist_ok=True)
    os.link(path, intent.archive)  # the link made, the old name not yet dropped
    with Session.open(path) as session:  # recovers, and follows to the successor
        assert session.path != path
    assert not os.path.exists(path) and os.path.isfile(intent.archive)
    assert load(intent.archive).entries  # the sealed file, archived once


def test_rotation_on_a_file_system_without_hard_links_still_archives(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the file system makes no hard links (FAT, some FUSE mounts: EPERM), the archive
    is moved by a rename after a look, and compressed the same way."""
    import errno as errnos

    def no_links(*args: object, **kwargs: object) -> None:
        raise OSError(errnos.EPERM, "Operation not permitted")

    publish_module = importlib.import_module("journal.publish")
    monkeypatch.setattr(publish_module.os, "link", no_links)
    path = make_rotatable(tmp_path / "sessions")
    result = rotation.rotate(path)
    assert result.rotated and not result.warnings
    assert result.archive is not None and result.archive.endswith(".gz")
    assert os.path.isfile(result.archive) and not os.path.exists(path)
    assert not os.path.exists(result.archive.removesuffix(".gz"))
