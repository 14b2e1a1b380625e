"""`journal rotate URL --archive-dir DIR [--keep N]` stopped by a real signal after its
transaction committed, while it exports the archive: it says so on stderr, and running the
same command again exports the archive, moves it out as `--keep` asks and removes the temp
the stopped export left."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("psycopg", reason="the PostgreSQL extra is not installed")

from test_pg_rotation import bytes_of, fill, new_session, rows_of  # noqa: E402

from journal import Session  # noqa: E402
from journal.archivegz import compressed_name  # noqa: E402
from journal.pg.rotation import rotate_database, stream_row  # noqa: E402
from journal.pg.storage import PostgresStorage  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

# `journal rotate ...` whose export stops, its temp written whole and flocked but not yet
# published, until a line comes on stdin or a signal; with "sigterm-as-ctrl-c" first, inside
# `terminated_as_interrupted` (SIGTERM raising SystemExit, as Ctrl-C raises KeyboardInterrupt)
WORKER = r"""
import os, sys
from journal import archivegz
from journal.cli import main
from journal.interrupt import terminated_as_interrupted

real = archivegz.write

def paused(chunks, raw):
    digest = real(chunks, raw)
    raw.flush()
    os.write(1, b"exporting\n")
    sys.stdin.readline()
    return digest

archivegz.write = paused
args = sys.argv[1:]
if args[0] == "sigterm-as-ctrl-c":
    with terminated_as_interrupted():
        sys.exit(main(args[1:]))
sys.exit(main(args))
"""


def exporting(args: list[str], *, sigterm_as_ctrl_c: bool = False) -> subprocess.Popen[str]:
    """`journal ARGS` started, once its export has written the temp (and holds it)."""
    extra = ["sigterm-as-ctrl-c"] if sigterm_as_ctrl_c else []
    proc = subprocess.Popen([sys.executable, "-c", WORKER, *extra, *args],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line == "exporting\n", proc.communicate(timeout=30)[1]
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc


def stopped_while_exporting(args: list[str], sig: int, *, sigterm_as_ctrl_c: bool = False
                            ) -> tuple[int, str]:
    """Run `journal ARGS` until its export has written the temp, send `sig`; its exit status
    (negative: the signal's number) and stderr."""
    proc = exporting(args, sigterm_as_ctrl_c=sigterm_as_ctrl_c)
    try:
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err


def temps(folder: Path) -> list[str]:
    return sorted(n for n in os.listdir(folder) if n.endswith(".archive.tmp"))


@pytest.mark.parametrize("keep", [None, 0])
def test_a_rotation_killed_while_exporting_is_finished_by_running_it_again(
        pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        keep: int | None) -> None:
    from journal.cli import main

    url = new_session(pg_url)
    folder = tmp_path / "archive"
    args = ["rotate", url, "--archive-dir", str(folder)]
    args += [] if keep is None else ["--keep", str(keep)]
    status, _ = stopped_while_exporting(args, signal.SIGKILL)
    assert status == -signal.SIGKILL
    sealed = PostgresStorage.from_url(url)
    row = stream_row(sealed)
    assert row is not None and row["successor"] is not None  # the rotation was committed
    assert row["exported_to"] is None and row["moved_out_at"] is None
    left = temps(folder)
    assert len(left) == 1
    held = bytes_of(sealed)

    assert main([*args, "--dry-run", "--json"]) == 0  # says what it would finish
    planned = json.loads(capsys.readouterr().out)
    path = str(folder / compressed_name(os.path.basename(str(row["file_name"]))))
    assert not planned["rotated"] and planned.get("exported") == {url: path}
    assert planned["movedOut"] == ({} if keep is None else {url: path})
    assert temps(folder) == left and stream_row(sealed) == row  # and changes nothing

    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert sorted(os.listdir(folder)) == [os.path.basename(path)]
    assert not out["rotated"]  # nothing more to rotate: what was left is finished
    assert out.get("exported") == {url: path}
    assert out.get("removedTemps") == [str(folder / left[0])]
    assert out["movedOut"] == ({} if keep is None else {url: path})
    assert gzip.decompress(Path(path).read_bytes()) == held
    row = stream_row(sealed)
    assert row is not None and row["exported_to"] == path
    if keep is None:
        assert row["moved_out_at"] is None and rows_of(sealed) > 0
    else:
        assert row["moved_out_at"] is not None and rows_of(sealed) == 0
    assert bytes_of(sealed) == held

    assert main([*args, "--json"]) == 0  # and then there is nothing left to do
    again = json.loads(capsys.readouterr().out)
    assert again["exported"] == {} and again["movedOut"] == {} and again["removedTemps"] == []


@pytest.mark.parametrize("sigterm_as_ctrl_c", [False, True])
def test_a_rotation_interrupted_while_exporting_says_it_rotated_and_what_is_left(
        pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        sigterm_as_ctrl_c: bool) -> None:
    """Ctrl-C (and SIGTERM where a command takes it as Ctrl-C) after the commit: the stderr
    says the session was rotated, into what, what is left and that running the command again
    finishes it; the export's temp is removed; the rerun exports and moves out."""
    from journal.cli import main

    url = new_session(pg_url)
    folder = tmp_path / "archive"
    args = ["rotate", url, "--archive-dir", str(folder), "--keep", "0"]
    sig = signal.SIGTERM if sigterm_as_ctrl_c else signal.SIGINT
    status, err = stopped_while_exporting(args, sig, sigterm_as_ctrl_c=sigterm_as_ctrl_c)
    assert status == 128 + sig
    row = stream_row(PostgresStorage.from_url(url))
    assert row is not None and row["successor"] is not None and row["exported_to"] is None
    assert "Traceback" not in err
    said = " ".join(err.split())
    assert f"{url} was rotated into " in said and str(row["successor"]) in said
    assert f"exporting its archive to {folder}" in said
    assert "moving the archives beyond the newest 0 out of the database" in said
    assert "run the same command again to finish" in said
    assert temps(folder) == []

    assert main(args) == 0
    out = capsys.readouterr().out
    assert "not rotated" in out
    row = stream_row(PostgresStorage.from_url(url))
    assert row is not None and row["exported_to"] is not None
    assert row["moved_out_at"] is not None
    assert f"exported archive {url} to {row['exported_to']}" in out
    assert f"moved old archive {url} out of the database to {row['exported_to']}" in out


def test_a_rerun_leaves_the_temp_of_an_export_still_running(
        pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A temp is stale only when no live process holds it: a rerun while the first command
    still exports (it only looks stopped) exports alongside it and leaves its temp; the
    first then finds the archive there, holding its bytes, and takes it."""
    from journal.cli import main

    url = new_session(pg_url)
    folder = tmp_path / "archive"
    args = ["rotate", url, "--archive-dir", str(folder)]
    first = exporting(args)
    try:
        assert main([*args, "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        path = stream_row(PostgresStorage.from_url(url))["exported_to"]  # type: ignore[index]
        assert path is not None and out.get("exported") == {url: path}
        assert out.get("removedTemps") == []
        assert len(temps(folder)) == 1  # the first one's, still held
        _, err = first.communicate("\n", timeout=60)  # and on it goes
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 0, err
    assert sorted(os.listdir(folder)) == [os.path.basename(path)]
    assert stream_row(PostgresStorage.from_url(url))["exported_to"] == path  # type: ignore[index]


def test_a_session_rotating_with_an_archive_dir_exports_the_archives_left_unexported(
        pg_url: str, tmp_path: Path) -> None:
    """The rule the command's rerun follows holds for an open session's rotation too: every
    archive of the lineage not yet exported is exported, not only the one it seals."""
    url = new_session(pg_url)
    first = rotate_database(url)  # no archive folder: the archive stays in the database only
    assert first.rotated
    folder = tmp_path / "archive"
    with Session.open(url) as session:
        fill(session, turns=10)
        result = session.rotate(archive_dir=str(folder))
    assert result.rotated
    older, newer = PostgresStorage.from_url(url), PostgresStorage.from_url(first.successor or "")
    exported = {s.locator: stream_row(s)["exported_to"]  # type: ignore[index]
                for s in (older, newer)}
    assert None not in exported.values()
    assert sorted(os.listdir(folder)) == sorted(os.path.basename(p) for p in exported.values())
    assert result.exported == exported and result.archive == exported[newer.locator]


def test_a_session_with_nothing_to_rotate_still_exports_and_keeps_as_asked(
        pg_url: str, tmp_path: Path) -> None:
    """`Session.rotate(archive_dir=, keep=)` that finds nothing to rotate finishes the
    lineage as `journal rotate URL` does then: the archives left unexported are exported and
    those beyond `keep` moved out (it returned at once, as a file session's did)."""
    url = new_session(pg_url)
    first = rotate_database(url)  # the archive stays in the database only
    assert first.rotated
    folder = tmp_path / "archive"
    with Session.open(url) as session:
        result = session.rotate(archive_dir=str(folder), keep=0)
    assert not result.rotated  # just rotated: nothing before the kept entries
    row = stream_row(PostgresStorage.from_url(url))
    assert row is not None and row["exported_to"] is not None
    assert row["moved_out_at"] is not None
    assert result.moved_out == {PostgresStorage.from_url(url).locator: row["exported_to"]}


def test_an_interruption_right_after_the_commit_still_says_it_rotated(
        pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C between the rotation's commit and its result (nothing returned yet): the
    interruption still carries the note that the session was rotated and what is left."""
    import journal.pg.rotation as rotation

    url = new_session(pg_url)

    def interrupted(message: str, *args: object) -> None:
        if message.startswith("%s: rotated into"):
            raise KeyboardInterrupt

    monkeypatch.setattr(rotation.log, "info", interrupted)
    with pytest.raises(KeyboardInterrupt) as stopped:
        rotate_database(url, archive_dir=str(tmp_path / "archive"))
    notes = getattr(stopped.value, "__notes__", [])
    assert len(notes) == 1 and "was rotated into" in notes[0], notes
    assert "run the same command again" in notes[0]
    row = stream_row(PostgresStorage.from_url(url))
    assert row is not None and row["successor"] in notes[0]


def test_a_session_rotation_interrupted_while_exporting_says_what_is_left(
        pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`Session.rotate(archive_dir=)` of a database session interrupted while it exports
    (after the commit: the session writes on in its successor): the interruption carries a
    note that it rotated, what is left, and how to finish it, as `rotate_database`'s does;
    it had none."""
    import journal.pg.rotation as rotation

    url = new_session(pg_url)

    def interrupted(*args: object, **kwargs: object) -> str:
        raise KeyboardInterrupt

    monkeypatch.setattr(rotation, "export_archive", interrupted)
    with Session.open(url) as session:
        fill(session, turns=10)
        with pytest.raises(KeyboardInterrupt) as stopped:
            session.rotate(archive_dir=str(tmp_path / "archive"))
        assert session.path != PostgresStorage.from_url(url).locator  # writes on, after
    notes = getattr(stopped.value, "__notes__", [])
    assert len(notes) == 1 and "was rotated into" in notes[0], notes
    assert "same archive folder finishes it" in notes[0]
