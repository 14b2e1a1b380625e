"""`journal push` run again brings the database up to date with files that grew: a session the
database holds the beginning of gets the file's new complete lines, appended under its lease
as any append is; a lineage rotated since is completed and linked; a session of which the
database holds more or other bytes is refused, with nothing of it changed, and the rest is
pushed; a second run changes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("psycopg", reason="the PostgreSQL extra is not installed")

from journal import Session, follow, load  # noqa: E402
from journal.cli import main  # noqa: E402
from journal.pg.connect import connect  # noqa: E402
from journal.pg.storage import PostgresStorage  # noqa: E402
from journal.pg.transfer import PushRefused, pull, push  # noqa: E402
from journal.pg.url import session_url  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def files_under(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and (p.name.endswith(".jsonl") or p.name.endswith(".jsonl.gz"))}


def session_in(folder: Path, texts: list[str]) -> tuple[str, str]:
    """A new session file in `folder` holding `texts` as user messages: (path, id)."""
    folder.mkdir(parents=True, exist_ok=True)
    with Session.create(str(folder), cwd="/w") as session:
        for text in texts:
            session.append_message({"role": "user", "content": text, "timestamp": 1})
        return session.path, session.session_id


def rotated_in(folder: Path, **rotation: Any) -> tuple[str, str, Any]:
    """A new session in `folder` long enough to rotate, compacted and rotated with the
    `rotation` options: (its first file, its id, the rotation's result)."""
    path, session_id = session_in(folder, ["turn " + "x" * 200] * 30)
    with Session.open(path) as session:
        kept = session.append_message({"role": "user", "content": "kept", "timestamp": 1})
        session.append_compaction("summary", kept, 500)
        return path, session_id, session.rotate(**rotation)


def grow(path: str, texts: list[str]) -> list[str]:
    """Append `texts` to the session file as user messages; their entry ids."""
    with Session.open(path) as session:
        return [session.append_message({"role": "user", "content": t, "timestamp": 1})
                for t in texts]


def stream_state(pg_url: str, session: str) -> tuple[Any, ...]:
    """What a refusal must leave as it was: the session's bytes, epoch, successor, holder."""
    with connect(pg_url) as conn:
        row = conn.execute("SELECT epoch, successor, holder_pid, file_name FROM "
                           "journal.streams WHERE session = %s", (session,)).fetchone()
    with PostgresStorage(pg_url, session).open_reader() as reader:
        return (reader.read(0, reader.size), *(row or ()))


def by_name(result: Any) -> dict[str, dict[str, Any]]:
    return {Path(row["file"]).name: row for row in result.sessions}


def another_writer_appends_once_leased(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on, taking a session's lease is followed by another writer's line appended
    to it without the lease (as a writer that does not take it appends)."""
    real = PostgresStorage.lock

    def lock(self: PostgresStorage, timeout: float) -> Any:
        lease = real(self, timeout)
        appender = PostgresStorage(self.conninfo, self.session).open_appender()  # no lease
        appender.commit(b'{"type":"custom","id":"0000beef","parentId":null,"timestamp":"t",'
                        b'"customType":"other"}\n')
        appender.close()
        return lease

    monkeypatch.setattr(PostgresStorage, "lock", lock)


def test_a_session_that_grew_is_appended_and_pulls_byte_for_byte(
        pg_url: str, tmp_path: Path) -> None:
    path, session_id = session_in(tmp_path / "src", ["one", "two"])
    assert [row["action"] for row in push(path, pg_url).sessions] == ["new"]
    with connect(pg_url) as conn:
        epoch = conn.execute("SELECT epoch FROM journal.streams WHERE session = %s",
                             (session_id,)).fetchone()
    grow(path, ["three", "four", "five"])
    result = push(path, pg_url)
    [row] = result.sessions
    assert (row["action"], row["lines"], row["bytes"]) == ("appended", 3,
                                                           os.path.getsize(path))
    assert result.changed
    pull(session_url(pg_url, session_id), tmp_path / "out")
    assert files_under(tmp_path / "out") == files_under(tmp_path / "src")
    with connect(pg_url) as conn:  # appended under the lease: its epoch moved on, let go
        row2 = conn.execute("SELECT epoch, holder_pid FROM journal.streams WHERE session = %s",
                            (session_id,)).fetchone()
    assert epoch is not None and row2 is not None
    assert row2[0] == epoch[0] + 1 and row2[1] is None
    again = push(path, pg_url)  # and again: nothing to do
    assert [row["action"] for row in again.sessions] == ["unchanged"] and not again.changed
    assert stream_state(pg_url, session_id)[1] == row2[0]  # not even the lease was taken


def test_push_twice_from_the_command_line_changes_nothing_the_second_time(
        pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--json` says per session what was done; the second run says nothing changed."""
    path, _ = session_in(tmp_path / "src", ["one"])
    other, _ = session_in(tmp_path / "src", ["other"])
    assert main(["push", str(tmp_path / "src"), pg_url]) == 0
    capsys.readouterr()
    grow(path, ["two", "three"])
    assert main(["push", str(tmp_path / "src"), pg_url, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert {Path(r["file"]).name: (r["action"], r.get("lines")) for r in report["sessions"]} == {
        Path(path).name: ("appended", 2), Path(other).name: ("unchanged", None)}
    assert [Path(r["file"]).name for r in report["pushed"]] == [Path(path).name]
    assert main(["push", str(tmp_path / "src"), pg_url]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "nothing to push: the database is up to date (2 session(s) unchanged)"
    assert all(line.startswith("unchanged  ") for line in out[:-1])


def test_a_grown_and_rotated_lineage_is_completed_linked_and_extended(
        pg_url: str, tmp_path: Path) -> None:
    """Pushed while live, the file then grew, was rotated (into `archive/<name>.gz`, sealed)
    and its successor written to: the push appends the rest of the old session (its seal
    included), stores the successor and points the old one at it, so that opening the old
    id goes on in the live one and a pull gives the files as they are."""
    folder = tmp_path / "src"
    path, old_id = session_in(folder, ["one"])
    push(path, pg_url)
    with Session.open(path) as session:
        for i in range(30):
            session.append_message({"role": "user", "content": f"turn {i} " + "x" * 200,
                                    "timestamp": 1})
        kept = session.append_message({"role": "user", "content": "kept", "timestamp": 1})
        session.append_compaction("summary", kept, 500)
        assert session.rotate().rotated
        session.append_message({"role": "user", "content": "live", "timestamp": 1})
        live, live_id = session.path, session.session_id
    archive = f"archive/{Path(path).name}.gz"
    assert set(files_under(folder)) == {archive, Path(live).name}
    result = push(live, pg_url)
    rows = by_name(result)
    assert rows[Path(archive).name]["action"] == "appended"
    assert rows[Path(archive).name]["sealed"] == session_url(pg_url, live_id)
    assert rows[Path(live).name]["action"] == "new"
    with connect(pg_url) as conn:
        row = conn.execute("SELECT successor, file_name, sealed_at IS NOT NULL FROM "
                           "journal.streams WHERE session = %s", (old_id,)).fetchone()
    assert row == (live_id, archive, True)
    with Session.open(session_url(pg_url, old_id)) as session:
        assert session.session_id == live_id
        assert session.live_context().messages[-1]["content"] == "live"
    pull(session_url(pg_url, old_id), tmp_path / "out")
    assert files_under(tmp_path / "out") == files_under(folder)
    again = push(live, pg_url)
    assert {row["action"] for row in again.sessions} == {"unchanged"} and not again.changed


def test_a_database_copy_that_grew_on_its_own_is_refused_and_left_as_it_is(
        pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One session written to in the database since it was pushed (more lines), another
    written to in both (other bytes), a third that grew as a file: the first two are refused,
    naming what differs, each left exactly as it was (not even leased); the third is
    appended; the command exits 2 with one `Error:` line per refused session."""
    folder = tmp_path / "src"
    more, more_id = session_in(folder, ["a"])
    other, other_id = session_in(folder, ["b"])
    grew, grew_id = session_in(folder, ["c"])
    push(str(folder), pg_url)
    for session_id in (more_id, other_id):
        with Session.open(session_url(pg_url, session_id)) as session:
            session.append_message({"role": "user", "content": "db", "timestamp": 1})
    grow(other, ["file"])
    grow(grew, ["file"])
    before = {s: stream_state(pg_url, s) for s in (more_id, other_id)}
    with pytest.raises(PushRefused) as refused:
        push(str(folder), pg_url)
    rows = by_name(refused.value.result)
    assert rows[Path(grew).name]["action"] == "appended"
    assert rows[Path(more).name]["action"] == "refused"
    assert rows[Path(more).name]["reason"].startswith(
        "the database holds 1 line(s) more than the file")
    assert rows[Path(other).name]["reason"].startswith(
        "the database holds other bytes: line 3 (at byte ")
    assert {s: stream_state(pg_url, s) for s in (more_id, other_id)} == before
    assert load(session_url(pg_url, grew_id)).end == os.path.getsize(grew)
    assert main(["push", str(folder), pg_url]) == 2
    out, err = capsys.readouterr()
    errors = [line for line in err.splitlines() if line.startswith("Error: ")]
    assert sorted(errors) == sorted(
        f"Error: {path}: refused: {rows[Path(path).name]['reason']}" for path in (more, other))
    assert "1 unchanged, 2 refused" in out.splitlines()[-1]
    assert {s: stream_state(pg_url, s) for s in (more_id, other_id)} == before


def test_a_follower_of_the_database_session_sees_the_pushed_lines_once(
        pg_url: str, tmp_path: Path) -> None:
    path, session_id = session_in(tmp_path / "src", ["one"])
    push(path, pg_url)
    url = session_url(pg_url, session_id)
    stop = threading.Event()
    seen: list[str] = []

    def consume() -> None:
        for entry in follow(url, stop=stop, timeout=0.2):
            seen.append(entry["id"])

    thread = threading.Thread(target=consume)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        with connect(pg_url) as conn:  # the follower is waiting for the session
            while conn.execute("SELECT count(*) FROM journal.followers WHERE session = %s",
                               (session_id,)).fetchone() != (1,):
                assert time.monotonic() < deadline
                time.sleep(0.05)
        first = grow(path, ["two", "three"])
        push(path, pg_url)
        second = grow(path, ["four"])
        push(path, pg_url)
        push(path, pg_url)  # unchanged: nothing more
        deadline = time.monotonic() + 10
        while len(seen) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # anything delivered twice would be by now
    finally:
        stop.set()
        thread.join(timeout=20)
    assert seen == first + second


def test_a_torn_last_line_is_left_out_and_pushed_once_it_is_whole(
        pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A line being written when the push reads the file (or torn by a crash) is not pushed,
    and the push says so; once whole, the next push appends it."""
    path, session_id = session_in(tmp_path / "src", ["one"])
    whole = Path(path).read_bytes()
    line = (b'{"type":"custom","id":"0badf00d","parentId":null,"timestamp":"t",'
            b'"customType":"x"}\n')
    with open(path, "ab") as f:
        f.write(line[:20])
    assert main(["push", path, pg_url, "--json"]) == 0
    out, err = capsys.readouterr()
    [row] = json.loads(out)["sessions"]
    assert (row["action"], row["bytes"], row["torn"]) == ("new", len(whole), 20)
    assert (f"Warning: {path}: its last line is incomplete (being written, or torn): its 20 "
            "bytes were left out") in err
    assert load(session_url(pg_url, session_id)).end == len(whole)
    with open(path, "ab") as f:
        f.write(line[20:])
    [row] = push(path, pg_url).sessions
    assert (row["action"], row["lines"], "torn" in row) == ("appended", 1, False)
    pull(session_url(pg_url, session_id), tmp_path / "out")
    assert files_under(tmp_path / "out") == files_under(tmp_path / "src")


HOLDER = """
import sys
from journal import Session
with Session.open(sys.argv[1]):
    print("ready", flush=True)
    sys.stdin.read()
"""


def test_a_session_whose_database_writer_holds_it_waits_then_is_refused(
        pg_url: str, tmp_path: Path) -> None:
    """Another process holds the database session's lease: the push waits for it up to its
    lock timeout, then refuses the session naming the holder, changing nothing; once the
    holder ended, the push appends."""
    path, session_id = session_in(tmp_path / "src", ["one"])
    push(path, pg_url)
    grow(path, ["two"])
    url = session_url(pg_url, session_id)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, url], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "ready\n"
        before = stream_state(pg_url, session_id)
        started = time.monotonic()
        with pytest.raises(PushRefused, match=f"pid {holder.pid}") as refused:
            push(path, pg_url, lock_timeout=0.5)
        assert time.monotonic() - started >= 0.5
        assert refused.value.result.sessions[0]["action"] == "refused"
        assert stream_state(pg_url, session_id) == before
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        assert holder.wait(20) == 0
    [row] = push(path, pg_url).sessions
    assert (row["action"], row["lines"]) == ("appended", 1)


def test_a_line_another_writer_appends_while_the_push_waits_refuses_it_whole(
        pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A writer without the lease appends to the session after the push compared it and took
    its lease: the push's check under the row lock finds the session changed and appends
    nothing (its lines would have landed after the other writer's)."""
    path, session_id = session_in(tmp_path / "src", ["one"])
    push(path, pg_url)
    grow(path, ["two"])
    another_writer_appends_once_leased(monkeypatch)
    with pytest.raises(PushRefused, match="changed while it was being appended to"):
        push(path, pg_url)
    monkeypatch.undo()
    data = stream_state(pg_url, session_id)[0]
    assert data.endswith(b'"customType":"other"}\n') and b'"two"' not in data


def test_a_grown_file_whose_new_line_cannot_be_stored_is_refused_before_any_lease(
        pg_url: str, tmp_path: Path) -> None:
    """A new line that is not UTF-8 (or holds a NUL) was found only when it was stored, with
    the session's lease taken: the refused session's epoch had moved on."""
    path, session = session_in(tmp_path / "s", ["one"])
    push(path, pg_url)
    before = stream_state(pg_url, session)
    with open(path, "ab") as f:  # a complete line a text column cannot hold
        f.write(b'{"type":"custom","customType":"x","data":"\xff","id":"zz","parentId":null,'
                b'"timestamp":"2025-01-01T00:00:00.000Z"}\n')
    with pytest.raises(PushRefused) as raised:
        push(path, pg_url)
    [row] = raised.value.result.refused
    assert "not valid UTF-8" in row["reason"], row
    assert stream_state(pg_url, session) == before  # the epoch too


def test_a_session_to_be_sealed_as_it_is_that_changed_meanwhile_is_not_sealed(
        pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The database holds a sealed file's bytes but not its successor (pushed before it);
    a later push seals it as it is. A line appended to it in the database after the push
    compared it was sealed in with it, unchecked."""
    folder = tmp_path / "src"
    path, session_id, result = rotated_in(folder)
    assert result.rotated and result.archive is not None
    lone = tmp_path / "lone"  # the sealed file without its successor
    lone.mkdir()
    copy = lone / Path(result.archive).name
    copy.write_bytes(Path(result.archive).read_bytes())
    [row] = push(str(copy), pg_url).sessions
    assert row["action"] == "new" and "sealed" not in row
    another_writer_appends_once_leased(monkeypatch)
    with pytest.raises(PushRefused, match="changed while it was being appended to"):
        push(str(folder), pg_url)
    monkeypatch.undo()
    with connect(pg_url) as conn:
        sealed = conn.execute("SELECT successor FROM journal.streams WHERE session = %s",
                              (session_id,)).fetchone()
    assert sealed == (None,)


def test_a_folder_push_takes_an_archive_rotation_numbered(pg_url: str, tmp_path: Path) -> None:
    """Rotation numbers an archive whose name is taken (`archive/<name>.2.gz`); `journal ls`
    counts such a file, and a folder push skipped it without a word, storing the live
    session without what it continues."""
    folder = tmp_path / "src"
    path, old_id = session_in(folder, ["turn " + "x" * 200] * 30)
    other, _ = session_in(tmp_path / "other", ["another session"])
    (folder / "archive").mkdir()
    os.rename(other, folder / "archive" / Path(path).name)  # the archive's name is taken
    with Session.open(path) as session:
        kept = session.append_message({"role": "user", "content": "kept", "timestamp": 1})
        session.append_compaction("summary", kept, 500)
        result = session.rotate()
    assert result.rotated and result.archive is not None
    assert result.archive.endswith(f"{Path(path).name}.2.gz")
    rows = push(str(folder), pg_url).sessions
    names = {row["name"]: row["action"] for row in rows}
    assert names.get(f"archive/{Path(path).name}.2.gz") == "new", names
    with Session.open(session_url(pg_url, old_id)) as session:  # leads to the live one
        assert session.session_id != old_id
    pull(pg_url, tmp_path / "out")
    assert files_under(tmp_path / "out") == files_under(folder)


def test_a_sealed_file_whose_successor_is_refused_is_refused_with_it(
        pg_url: str, tmp_path: Path) -> None:
    """The live successor and a copy of it (one session id) are refused; the sealed file
    was pushed alone, its seal line stored without the link to a successor: a session that
    reads sealed but is live in the database, and a writer appended after its seal."""
    folder = tmp_path / "src"
    path, old_id = session_in(folder, ["turn " + "x" * 200] * 30)
    push(str(folder), pg_url)
    before = stream_state(pg_url, old_id)
    with Session.open(path) as session:
        kept = session.append_message({"role": "user", "content": "kept", "timestamp": 1})
        session.append_compaction("summary", kept, 500)
        result = session.rotate()
    assert result.rotated and result.successor is not None
    copy = folder / "copy-of-live.jsonl"
    copy.write_bytes(Path(result.successor).read_bytes())
    with pytest.raises(PushRefused) as raised:
        push(str(folder), pg_url)
    actions = {Path(row["file"]).name: row["action"] for row in raised.value.result.sessions}
    assert set(actions.values()) == {"refused"}, actions
    assert stream_state(pg_url, old_id) == before


def test_a_file_a_rotation_moves_while_the_folder_is_read_is_found_again(
        pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rotation that moves a file while the push lists the folder refused its lineage
    with a bare "No such file or directory" (exit 2 for a nightly push): the folder is read
    again, and a file that keeps moving is refused saying to push again."""
    folder = tmp_path / "src"
    path, _ = session_in(folder, ["one"])
    places = [path, str(folder / "archive" / Path(path).name)]
    (folder / "archive").mkdir()
    walk, moves = os.walk, [0]

    def listed_then_moved(top: str, *args: Any, **kwargs: Any) -> Any:
        found = list(walk(top, *args, **kwargs))
        if moves[0] < limit:
            os.rename(places[moves[0] % 2], places[(moves[0] + 1) % 2])
            moves[0] += 1
        return iter(found)

    monkeypatch.setattr(os, "walk", listed_then_moved)
    limit = 1  # moved once: found at its new place
    [row] = push(str(folder), pg_url).sessions
    assert row["action"] == "new" and row["name"] == f"archive/{Path(path).name}", row
    limit = 10  # it keeps moving
    with pytest.raises(PushRefused) as raised:
        push(str(folder), pg_url)
    [row] = raised.value.result.refused
    assert "removed or renamed while it was pushed" in row["reason"]
    assert "push again" in row["reason"]



def test_an_archive_compressed_after_it_was_pushed_is_named_anew(
        pg_url: str, tmp_path: Path) -> None:
    """Pushed between a rotation and its compression (the archive still `archive/X.jsonl`),
    then compressed: the next push said `unchanged` and kept the old name, so a pull wrote
    a plain archive where the folder has `X.jsonl.gz` (and the successor names the .gz)."""
    import gzip

    folder = tmp_path / "src"
    path, old_id, result = rotated_in(folder, compress=False)
    assert result.rotated and result.archive is not None
    plain = Path(result.archive)
    push(str(folder), pg_url)
    with open(plain, "rb") as f, gzip.open(str(plain) + ".gz", "wb") as out:  # compressed now
        out.write(f.read())
    plain.unlink()
    rows = {row["name"]: row for row in push(str(folder), pg_url).sessions}
    row = rows[f"archive/{plain.name}.gz"]
    assert row["action"] == "unchanged" and row["renamed"] == f"archive/{plain.name}"
    pull(pg_url, tmp_path / "out")
    assert set(files_under(tmp_path / "out")) == set(files_under(folder))
    again = push(str(folder), pg_url)
    assert not again.changed


def test_a_folder_push_takes_the_archives_rotation_put_outside_it(
        pg_url: str, tmp_path: Path) -> None:
    """`journal rotate DIR --archive-dir OUT` puts archives outside the folder; a push of the
    folder stored the live successors alone (a single file's push took its archives): the
    database lost the history, and a session pushed before its rotation stayed live there."""
    folder, out = tmp_path / "q", tmp_path / "qa"
    path, old_id = session_in(folder, ["turn " + "x" * 200] * 30)
    push(str(folder), pg_url)  # pushed live, before its rotation
    with Session.open(path) as session:
        kept = session.append_message({"role": "user", "content": "kept", "timestamp": 1})
        session.append_compaction("summary", kept, 500)
        result = session.rotate(archive_dir=str(out))
    assert result.rotated and result.archive is not None
    assert Path(result.archive).parent == out
    rows = {row["name"]: row for row in push(str(folder), pg_url).sessions}
    archived = rows[f"archive/{Path(result.archive).name}"]
    assert archived["action"] == "appended" and "sealed" in archived, rows
    with Session.open(session_url(pg_url, old_id)) as session:  # goes on in the live one
        assert session.session_id != old_id
    assert not push(str(folder), pg_url).changed


TERMINATED_WHILE_STORING = """
import os, signal, sys
from journal.pg.storage import PostgresStorage
from journal.cli import main

real, calls = PostgresStorage.create_in, [0]

def create_in(self, conn, data):
    calls[0] += 1
    if calls[0] == 2:  # the second lineage: a service manager stops the push now
        os.kill(os.getpid(), signal.SIGTERM)
    return real(self, conn, data)

PostgresStorage.create_in = create_in
sys.exit(main(sys.argv[1:]))
"""


def test_a_push_stopped_by_sigterm_says_what_is_stored_and_to_run_it_again(
        pg_url: str, tmp_path: Path) -> None:
    """A push stopped mid-way exited 143 without a word: a nightly job's log did not say
    that some lineages were stored and the rest wanted the same push again."""
    folder = tmp_path / "src"
    for i in range(3):
        session_in(folder, [f"session {i}"])
    done = subprocess.run([sys.executable, "-c", TERMINATED_WHILE_STORING, "push",
                           str(folder), pg_url], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 143, done.stderr
    assert "push interrupted" in done.stderr and "run the same push again" in done.stderr
    with connect(pg_url) as conn:
        stored = conn.execute("SELECT count(*) FROM journal.streams").fetchone()
    assert stored == (1,)  # the first lineage; the second was rolled back
    again = push(str(folder), pg_url)
    assert [row["action"] for row in again.sessions].count("new") == 2


def test_an_archive_elsewhere_with_a_copy_in_the_folder_is_pushed_once(
        pg_url: str, tmp_path: Path) -> None:
    """An archive `rotate --archive-dir` put elsewhere, copied back into the folder's own
    `archive/`: the folder push took both, under one name, and refused the whole lineage as
    two files of one session."""
    import shutil

    folder, out = tmp_path / "q", tmp_path / "qa"
    path, _, result = rotated_in(folder, archive_dir=str(out))
    assert result.archive is not None
    (folder / "archive").mkdir()
    shutil.copy2(result.archive, folder / "archive" / Path(result.archive).name)
    rows = push(str(folder), pg_url).sessions
    assert sorted(row["action"] for row in rows) == ["new", "new"], rows
    assert {row["file"] for row in rows} >= {str(folder / "archive" / Path(result.archive).name)}


def test_a_push_while_a_compression_has_both_files_takes_the_gz(
        pg_url: str, tmp_path: Path) -> None:
    """Between a compression's publish of `X.gz` and its removal of `X`, a push saw both, two
    files of one session, and refused the whole lineage."""
    import gzip

    folder = tmp_path / "src"
    path, _, result = rotated_in(folder, compress=False)
    assert result.archive is not None
    plain = Path(result.archive)
    with open(plain, "rb") as f, gzip.open(str(plain) + ".gz", "wb") as out:
        out.write(f.read())  # published; the plain file not removed yet
    rows = push(str(folder), pg_url).sessions
    assert sorted(row["name"] for row in rows) == sorted(
        [Path(result.successor or "").name, f"archive/{plain.name}.gz"]), rows
    assert {row["action"] for row in rows} == {"new"}


def alike_row(pg_url: str, session: str) -> tuple[Any, ...]:
    """What the last push recorded as alike: (its generation, size, SHA-256), and the
    session's current generation."""
    with connect(pg_url) as conn:
        row = conn.execute("SELECT alike_generation, alike_size, alike_sha256, generation "
                           "FROM journal.streams WHERE session = %s", (session,)).fetchone()
    assert row is not None
    return tuple(row)


def tamper_with_line(pg_url: str, session: str, position: int) -> None:
    """Change a stored line's bytes behind the journal's back (same length), as nothing the
    journal does ever changes a generation's stored lines: only a comparison that reads that
    row can see it."""
    with connect(pg_url) as conn:
        changed = conn.execute(
            "UPDATE journal.entries e SET line = replace(e.line, '\"one\"', '\"ONE\"') "
            "FROM journal.streams s WHERE e.stream = s.id AND e.generation = s.generation "
            "AND s.session = %s AND e.position = %s", (session, position)).rowcount
    assert changed == 1


def test_a_push_again_compares_only_the_lines_after_what_the_last_push_found_alike(
        pg_url: str, tmp_path: Path) -> None:
    """A push records the SHA-256 of what it stored or found alike (schema version 7); the
    next one checks the file's bytes up to there against it and reads only the rows after
    them: a grown 100 MB session is not read back whole every run."""
    import hashlib

    path, session_id = session_in(tmp_path / "src", ["one", "two"])
    push(path, pg_url)
    data = Path(path).read_bytes()
    generation = alike_row(pg_url, session_id)[3]
    assert alike_row(pg_url, session_id) == (generation, len(data),
                                             hashlib.sha256(data).hexdigest(), generation)
    tamper_with_line(pg_url, session_id, 1)  # before what was found alike: not read again
    grow(path, ["three"])
    [row] = push(path, pg_url).sessions
    assert (row["action"], row["lines"]) == ("appended", 1)
    grown = Path(path).read_bytes()
    assert alike_row(pg_url, session_id)[1:3] == (len(grown), hashlib.sha256(grown).hexdigest())
    with connect(pg_url) as conn:  # without the record, the whole session is compared
        conn.execute("UPDATE journal.streams SET alike_generation = NULL WHERE session = %s",
                     (session_id,))
    with pytest.raises(PushRefused) as refused:
        push(path, pg_url)
    [row] = refused.value.result.sessions
    assert row["reason"].startswith("the database holds other bytes: line 2 (at byte ")


def test_what_an_earlier_push_found_alike_counts_only_for_the_same_bytes_and_generation(
        pg_url: str, tmp_path: Path) -> None:
    """A file rewritten before the recorded end (same length), or a session replaced in the
    database since (a new generation), is compared whole again: the first refused, the
    second found alike and recorded for its new generation."""
    path, session_id = session_in(tmp_path / "src", ["one", "two"])
    push(path, pg_url)
    data = Path(path).read_bytes()
    Path(path).write_bytes(data.replace(b'"one"', b'"ONE"'))
    with pytest.raises(PushRefused) as refused:
        push(path, pg_url)
    [row] = refused.value.result.sessions
    assert row["reason"].startswith("the database holds other bytes: line 2 (at byte ")
    Path(path).write_bytes(data)
    storage = PostgresStorage.from_url(session_url(pg_url, session_id))
    storage.publish(data, "repair")  # the same bytes as a new generation
    before = alike_row(pg_url, session_id)
    assert before[0] != before[3]
    [row] = push(path, pg_url).sessions
    assert row["action"] == "unchanged"
    assert alike_row(pg_url, session_id)[0] == before[3]


def test_a_push_reads_the_session_it_compares_in_one_snapshot(
        pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two replacements committed between the push's reading of the session's row and of its
    lines delete the rows of the generation it read (review 46): the comparison still sees
    them, so a file the database holds more than is refused, not taken for unchanged."""
    from journal.pg import transfer

    path, session_id = session_in(tmp_path / "src", ["one", "two"])
    push(path, pg_url)
    url = session_url(pg_url, session_id)
    with Session.open(url) as session:
        session.append_message({"role": "user", "content": "db", "timestamp": 1})
    storage = PostgresStorage.from_url(url)
    with storage.open_reader() as reader:
        stored = reader.stream.read()
    real = transfer._alike_before
    replaced: list[int] = []

    def replaced_meanwhile(*args: Any) -> int:
        if not replaced:
            storage.publish(stored, "repair")
            storage.publish(stored, "repair")
            replaced.append(1)
        return real(*args)

    monkeypatch.setattr(transfer, "_alike_before", replaced_meanwhile)
    with pytest.raises(PushRefused) as refused:
        push(path, pg_url)
    [row] = refused.value.result.sessions
    assert replaced and row["reason"].startswith("the database holds 1 line(s) more")
