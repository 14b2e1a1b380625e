"""Rotation of a database session: successor and seal in one transaction, the file rotation's
content rules, the old id followed to the live one, archives exported by policy."""

from __future__ import annotations

import gzip
import json
import logging
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("psycopg", reason="the PostgreSQL extra is not installed")
import psycopg  # noqa: E402

from journal import LockTimeout, Session, load, rotate  # noqa: E402
from journal.context import build_context  # noqa: E402
from journal.pg import rotation as pg_rotation  # noqa: E402
from journal.pg.rotation import rotate_database, stream_row  # noqa: E402
from journal.pg.storage import PostgresStorage  # noqa: E402
from journal.pg.url import session_url  # noqa: E402
from journal.rotation import RotationResult  # noqa: E402
from journal.seal import is_seal  # noqa: E402
from journal.storage import as_storage  # noqa: E402
from journal.tree import Tree  # noqa: E402


def fill(session: Session, turns: int = 30) -> None:
    """Turns, a model and a name, a compaction keeping the last few, more turns."""
    session.append_model_change("anthropic", "claude-x")
    session.append_thinking_level_change("high")
    session.append_session_info("rotating")
    kept = None
    for i in range(turns):
        entry = session.append_message({"role": "user", "content": f"question {i} " + "x" * 200,
                                        "timestamp": 1})
        if i == turns - 5:
            kept = entry
        session.append_message({"role": "assistant", "content": [{"type": "text",
                                "text": f"answer {i}"}], "provider": "anthropic",
                                "model": "claude-x", "api": "anthropic-messages",
                                "usage": {"input": 1, "output": 1}, "stopReason": "stop",
                                "timestamp": 2})
    session.append_compaction("what happened before", kept, 1000)
    session.append_message({"role": "user", "content": "after the compaction", "timestamp": 3})


def context_of(target: object) -> object:
    snap = load(target)  # type: ignore[arg-type]
    tree = Tree(snap.entries)
    return build_context(tree, tree.leaf_id)


def new_session(pg_url: str) -> str:
    url = session_url(pg_url, str(uuid.uuid4()))
    with Session.create(url, cwd="/work") as session:
        fill(session)
    return url


def test_rotation_creates_the_successor_seals_the_old_and_opening_follows(pg_url: str) -> None:
    url = new_session(pg_url)
    before = context_of(url)
    old_size = as_storage(url).size()
    result = rotate_database(url)
    assert result.rotated and result.successor_id is not None
    assert result.successor_size < old_size
    old = PostgresStorage.from_url(url)
    row = stream_row(old)
    assert row is not None and row["successor"] == result.successor_id
    old_entries = load(url).entries
    seal = old_entries[-1]
    assert is_seal(seal) and seal["data"]["sessionId"] == result.successor_id
    successor = session_url(pg_url, result.successor_id)
    header = load(successor).header
    assert header is not None and header["parentSession"] == row["file_name"]
    assert row["file_name"].startswith("archive/")
    assert context_of(successor) == before
    # the old id leads to the live session, for writing
    with Session.open(url) as session:
        assert session.session_id == result.successor_id
        assert session.followed == [old.locator]
        session.append_message({"role": "user", "content": "on the successor", "timestamp": 4})
    assert load(successor).entries[-1]["message"]["content"] == "on the successor"
    assert len(load(url).entries) == len(old_entries)  # the sealed session is not written


def test_successor_holds_what_file_rotation_would(pg_url: str, tmp_path: Path) -> None:
    url = new_session(pg_url)
    with as_storage(url).open_reader() as reader:
        data = reader.stream.read()
    path = tmp_path / "s.jsonl"
    path.write_bytes(data)
    file_result = rotate(str(path), compress=False)
    db_result = rotate_database(url)
    assert file_result.rotated and db_result.rotated
    assert file_result.successor is not None and db_result.successor_id is not None
    from_file = load(file_result.successor).entries
    from_db = load(session_url(pg_url, db_result.successor_id)).entries

    def shape(entries: list[dict[str, object]]) -> list[object]:
        # a model_change built from an assistant message gets a fresh id in each
        return [(e["type"], e["id"] if e["type"] != "model_change" else None)
                for e in entries]

    assert shape(from_file) == shape(from_db)
    assert db_result.entries_copied == file_result.entries_copied


def test_a_failed_rotation_changes_nothing(pg_url: str,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    url = new_session(pg_url)
    with as_storage(url).open_reader() as reader:
        before = reader.stream.read()
    real = PostgresStorage.create_in

    def create_then_fail(self: PostgresStorage, conn: psycopg.Connection[object],
                         data: bytes) -> None:
        real(self, conn, data)  # the successor is made inside the transaction ...
        raise psycopg.OperationalError("the connection broke")  # ... which then fails

    monkeypatch.setattr(PostgresStorage, "create_in", create_then_fail)
    with pytest.raises(pg_rotation.DatabaseError, match="nothing changed"):
        rotate_database(url)
    with as_storage(url).open_reader() as reader:
        assert reader.stream.read() == before
    row = stream_row(PostgresStorage.from_url(url))
    assert row is not None and row["successor"] is None
    with psycopg.connect(pg_url) as conn:
        count = conn.execute("SELECT count(*) FROM journal.streams").fetchone()
    assert count is not None and count[0] == 1


def test_rotation_waits_for_the_writer_and_names_it(pg_url: str) -> None:
    url = new_session(pg_url)
    with Session.open(url):
        with pytest.raises(LockTimeout):
            rotate_database(url, lock_timeout=0.2)


def test_nothing_to_rotate_without_a_compaction(pg_url: str) -> None:
    url = session_url(pg_url, "plain")
    with Session.create(url, cwd="/w") as session:
        session.append_message({"role": "user", "content": "hi", "timestamp": 1})
    result = rotate_database(url)
    assert not result.rotated and "compaction" in result.reason


def test_archive_exported_to_gz_by_policy(pg_url: str, tmp_path: Path) -> None:
    url = new_session(pg_url)
    result = rotate_database(url, archive_dir=str(tmp_path / "archive"))
    assert result.rotated and result.archive is not None
    with as_storage(url).open_reader() as reader:
        sealed = reader.stream.read()
    assert result.archive.endswith(".jsonl.gz")
    assert gzip.decompress(Path(result.archive).read_bytes()) == sealed
    row = stream_row(PostgresStorage.from_url(url))
    assert row is not None and row["exported_to"] == result.archive


def test_an_archive_folder_that_cannot_be_one_refuses_the_rotation_before_any_change(
        pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--archive-dir` naming a file: the rotation (the command's, a dry run's and an open
    session's) is refused, exit 2, and the session is not rotated (it once rotated, and the
    export failed after, as a warning)."""
    from journal import JournalError
    from journal.cli import main

    url = new_session(pg_url)
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    for extra in ([], ["--dry-run"]):
        assert main(["rotate", url, "--archive-dir", str(blocker), *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert err.startswith("Error: ") and "is a regular file, not a folder" in err
        assert "nothing was changed" in err
    assert stream_row(PostgresStorage.from_url(url))["successor"] is None  # type: ignore[index]
    with Session.open(url) as session:
        with pytest.raises(JournalError, match="not a folder"):
            session.rotate(archive_dir=str(blocker))
    assert stream_row(PostgresStorage.from_url(url))["successor"] is None  # type: ignore[index]


def test_an_archive_dir_given_relative_is_recorded_absolute(
        pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The row's `exported_to` is read from anywhere: a relative --archive-dir is recorded as
    the absolute path it meant where the rotation ran."""
    url = new_session(pg_url)
    monkeypatch.chdir(tmp_path)
    result = rotate_database(url, archive_dir="kept")
    row = stream_row(PostgresStorage.from_url(url))
    assert row is not None and result.archive is not None
    assert row["exported_to"] == result.archive == str(tmp_path / "kept" / Path(
        result.archive).name)
    assert gzip.decompress((tmp_path / "kept" / Path(result.archive).name).read_bytes())


def test_rotating_twice_then_opening_the_first_id(pg_url: str) -> None:
    url = new_session(pg_url)
    first = rotate_database(url)
    with Session.open(url) as session:
        fill(session, turns=10)
    second = rotate_database(url)  # the old id: rotates the live one
    assert first.rotated and second.rotated
    assert second.path == session_url(pg_url, str(first.successor_id))
    with Session.open(url) as session:
        assert session.session_id == second.successor_id


def test_an_open_session_rotates_by_policy_and_writes_on_in_the_successor(pg_url: str) -> None:
    from journal import RotationPolicy

    url = session_url(pg_url, str(uuid.uuid4()))
    with Session.create(url, cwd="/w") as session:
        session.rotation_policy = RotationPolicy()  # every compaction rotates
        fill(session)  # ends with a compaction, then one more message
        assert session.session_id != url.rsplit("=", 1)[1]
        successor_id = session.session_id
        before = context_of(session.path)
        session.append_message({"role": "user", "content": "carried on", "timestamp": 5})
        assert session.live_context().messages[-1]["content"] == "carried on"
    row = stream_row(PostgresStorage.from_url(url))
    assert row is not None and row["successor"] == successor_id
    successor = session_url(pg_url, successor_id)
    entries = load(successor).entries
    assert entries[-1]["message"]["content"] == "carried on"
    assert before is not None
    ids = [e["id"] for e in load(url).entries] + [e["id"] for e in entries]
    shared = {e["id"] for e in entries} & {e["id"] for e in load(url).entries}
    assert len(set(ids)) == len(ids) - len(shared)  # only the kept entries repeat
    with Session.open(url) as again:  # the old id: the successor, its lease free again
        assert again.session_id == successor_id


def test_rotate_command_on_a_database_session(pg_url: str, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from journal.cli import main

    url = new_session(pg_url)
    assert main(["rotate", url, "--dry-run", "--json"]) == 0
    planned = json.loads(capsys.readouterr().out)
    assert planned["rotated"] and planned["dryRun"]
    assert stream_row(PostgresStorage.from_url(url))["successor"] is None  # type: ignore[index]
    assert main(["rotate", url, "--no-compress"]) == 2
    assert "for files" in capsys.readouterr().err
    assert main(["rotate", url, "--archive-dir", str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    assert "rotated into" in out and str(tmp_path / "a") in out
    row = stream_row(PostgresStorage.from_url(url))
    assert row is not None and row["successor"] is not None


def test_a_session_opened_on_a_database_successor_never_reuses_a_sealed_id(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The database twin of the file test: a writer that opens the successor later (another
    process, say) avoids the sealed session's ids too, or a follower, which skips the entries
    rotation copied by id, would skip its new entry."""
    from journal.idscan import IdScan

    url = new_session(pg_url)
    sealed = {e["id"] for e in load(url).entries if isinstance(e.get("id"), str)}
    assert rotate_database(url).rotated
    with Session.open(url) as session:
        left_behind = sorted(sealed - set(session.tree.ids))[0]
        session.append_message({"role": "user", "content": "first", "timestamp": 1})
        previous = session._previous_ids
        assert isinstance(previous, IdScan) and previous.wait(10)
        draws = iter([int(left_behind, 16), 0xABCDEF12])
        monkeypatch.setattr("journal.model.random.getrandbits", lambda n: next(draws))
        assert session.append_message({"role": "user", "content": "new"}) == "abcdef12"


def test_a_session_never_rotated_has_no_predecessor(pg_url: str) -> None:
    url = new_session(pg_url)
    assert PostgresStorage.from_url(url).predecessor() is None
    assert rotate_database(url).rotated
    assert PostgresStorage.from_url(url).predecessor() is None  # the sealed one


def test_the_seal_names_the_last_entry_copied(pg_url: str) -> None:
    url = new_session(pg_url)
    result = rotate_database(url)
    assert result.rotated and result.path is not None
    seal = [e for e in load(url).entries if is_seal(e)][-1]
    successor = load(session_url(pg_url, str(result.successor_id))).entries
    assert seal["data"]["lastCopied"] == successor[-1]["id"]


# archives moved out of the database (--keep with --archive-dir)


def rotate_again(url: str, archive_dir: str | None = None,
                 keep: int | None = None) -> RotationResult:
    """More turns and a compaction in the live session, then a rotation."""
    with Session.open(url) as session:
        fill(session, turns=10)
    return rotate_database(url, archive_dir=archive_dir, keep=keep)


def lineage_of(url: str) -> list[PostgresStorage]:
    """The sessions of `url`'s lineage, oldest first."""
    live = pg_rotation.live_storage(PostgresStorage.from_url(url))
    chain = [live]
    while (older := chain[0].predecessor()) is not None:
        chain.insert(0, older)
    return chain


def rows_of(storage: PostgresStorage) -> int:
    with psycopg.connect(storage.conninfo) as conn:
        row = conn.execute("SELECT count(*) FROM journal.entries e JOIN journal.streams s "
                           "ON s.id = e.stream WHERE s.session = %s",
                           (storage.session,)).fetchone()
    assert row is not None
    return int(row[0])


def bytes_of(storage: PostgresStorage) -> bytes:
    with storage.open_reader() as reader:
        return reader.stream.read()


def export_name(storage: PostgresStorage, folder: Path) -> Path:
    """Where an export of `storage` to `folder` goes (`DIR/<file>.gz`)."""
    return folder / (Path(pg_rotation.file_name(storage)).name + ".gz")


def test_keep_moves_the_older_archives_out_and_they_read_as_before(
        pg_url: str, tmp_path: Path) -> None:
    from journal.pg.transfer import pull

    url = new_session(pg_url)
    first = rotate_database(url, archive_dir=str(tmp_path / "a"))
    assert first.rotated and first.moved_out == {}
    second = rotate_again(url, archive_dir=str(tmp_path / "a"))
    oldest, newer, live = lineage_of(url)
    before = {s.session: bytes_of(s) for s in (oldest, newer, live)}
    pull(url, tmp_path / "before")
    third = rotate_again(url, archive_dir=str(tmp_path / "a"), keep=1)
    assert second.rotated and third.rotated
    chain = lineage_of(url)
    assert [s.session for s in chain[:3]] == [oldest.session, newer.session, live.session]
    # the two oldest beyond the newest one archive: moved out, to their exports
    moved = third.moved_out
    assert set(moved) == {oldest.locator, newer.locator}
    for storage in (oldest, newer):
        row = stream_row(storage)
        assert row is not None and row["moved_out_at"] is not None
        assert row["exported_to"] == moved[storage.locator]
        assert rows_of(storage) == 0
        assert gzip.decompress(Path(moved[storage.locator]).read_bytes()) == before[
            storage.session]
        assert bytes_of(storage) == before[storage.session]  # read from the file
        assert load(storage.locator).entries  # and through everything above the seam
    assert rows_of(chain[2]) > 0  # the newest archive keeps its lines
    assert stream_row(chain[2])["moved_out_at"] is None  # type: ignore[index]
    # a pull writes the same files as before the move, byte for byte
    pull(session_url(pg_url, oldest.session), tmp_path / "after")
    written = sorted(p.relative_to(tmp_path / "after") for p in
                     (tmp_path / "after").rglob("*") if p.is_file())
    for relative in written:
        if (tmp_path / "before" / relative).exists():
            assert (tmp_path / "after" / relative).read_bytes() == (
                tmp_path / "before" / relative).read_bytes()
    assert len(written) == 4
    # a further rotation keeps one: the archive that was newest moves out now
    fourth = rotate_again(url, archive_dir=str(tmp_path / "a"), keep=1)
    assert list(fourth.moved_out) == [chain[2].locator]


def test_a_moved_out_archive_whose_file_is_not_here_says_where_it_is(
        pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from journal import JournalError
    from journal.cli import main
    from journal.pg.transfer import pull

    url = new_session(pg_url)
    result = rotate_database(url, archive_dir=str(tmp_path / "a"), keep=0)
    assert list(result.moved_out.values()) == [result.archive]
    assert result.archive is not None
    Path(result.archive).rename(tmp_path / "elsewhere.gz")
    with pytest.raises(JournalError, match="moved out of the database to .*not here"):
        load(url)
    assert main(["show", url]) != 0
    assert result.archive in capsys.readouterr().err
    # a search of the database says so and searches the rest (the live session)
    assert main(["search", "after the compaction", pg_url]) == 0
    found = capsys.readouterr()
    assert result.archive in found.err and "after the compaction" in found.out
    with pytest.raises(JournalError, match="not here"):
        pull(url, tmp_path / "pulled")
    assert not any(p.is_file() for p in (tmp_path / "pulled").rglob("*"))
    # the live session is not troubled by it
    with Session.open(url) as session:
        session.append_message({"role": "user", "content": "on", "timestamp": 1})


def test_an_export_past_a_moved_out_archive_not_here_warns_and_goes_on(
        pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An export of a lineage whose archive was moved out (`rotate --keep`) to a file not on
    this machine exports the rest, exit 0, with a warning naming the archive and where it
    went, on stderr and in the export's header, worded as `journal usage` words its own. It
    failed outright (exit 2): on any other machine, the live session could not be exported."""
    from journal.cli import main

    url = new_session(pg_url)
    result = rotate_database(url, archive_dir=str(tmp_path / "a"), keep=0)
    assert result.archive is not None
    Path(result.archive).rename(tmp_path / "elsewhere.gz")
    sealed = PostgresStorage.from_url(url).locator
    assert main(["usage", url]) == 0
    counted = [line for line in capsys.readouterr().err.splitlines() if "not counted" in line]
    assert counted == [f"Warning: {sealed}: not counted: an archive moved out of the database "
                       f"to {result.archive}, which is not here (on another machine, or moved "
                       "or deleted since): read it where it is, or put it back there"]
    warning = counted[0].replace(": not counted: ", ": not exported: ")
    assert main(["export", url]) == 0
    out, err = capsys.readouterr()
    assert err.splitlines()[-1] == warning
    assert f"> **Warning**: {warning.removeprefix('Warning: ')}" in out
    assert "after the compaction" in out
    report_path = tmp_path / "export.jsonl"
    assert main(["export", url, "--format", "jsonl", "-o", str(report_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["warnings"] == [warning.removeprefix("Warning: ")]
    assert "after the compaction" in report_path.read_text()


def test_move_out_refuses_a_file_that_does_not_hold_the_session(
        pg_url: str, tmp_path: Path) -> None:
    from journal import JournalError

    url = new_session(pg_url)
    result = rotate_database(url, archive_dir=str(tmp_path / "a"))
    assert result.archive is not None
    sealed = PostgresStorage.from_url(url)
    rows = rows_of(sealed)
    Path(result.archive).write_bytes(gzip.compress(b'{"type":"session"}\n'))
    with pytest.raises(JournalError, match="does not hold the session's bytes"):
        pg_rotation.move_out(sealed, str(tmp_path / "b"))
    assert rows_of(sealed) == rows and stream_row(sealed)["moved_out_at"] is None  # type: ignore[index]
    with pytest.raises(JournalError, match="not sealed"):
        pg_rotation.move_out(pg_rotation.live_storage(sealed), str(tmp_path / "b"))


def test_an_archive_never_exported_is_exported_as_it_moves_out(
        pg_url: str, tmp_path: Path) -> None:
    url = new_session(pg_url)
    assert rotate_database(url).rotated  # kept in the database only
    sealed = PostgresStorage.from_url(url)
    before = bytes_of(sealed)
    path = pg_rotation.move_out(sealed, str(tmp_path / "out"))
    assert Path(path).parent == tmp_path / "out"
    assert gzip.decompress(Path(path).read_bytes()) == before == bytes_of(sealed)
    assert pg_rotation.move_out(sealed, str(tmp_path / "other")) == path  # done already


def test_a_reader_open_during_the_move_reads_on_from_the_file(
        pg_url: str, tmp_path: Path) -> None:
    url = new_session(pg_url)
    assert rotate_database(url).rotated
    sealed = PostgresStorage.from_url(url)
    with sealed.open_reader() as reader:
        whole = reader.read(0, reader.size)
    with sealed.open_reader() as reader:
        head = reader.read(0, 100)
        pg_rotation.move_out(sealed, str(tmp_path / "out"))
        assert head + reader.read(100, reader.size - 100) == whole


def test_the_ids_of_a_moved_out_archive_are_read_from_its_file(
        pg_url: str, tmp_path: Path) -> None:
    from journal.idscan import IdScan

    url = new_session(pg_url)
    assert rotate_database(url).rotated
    sealed = PostgresStorage.from_url(url)
    ids = sealed.entry_ids()
    assert ids
    pg_rotation.move_out(sealed, str(tmp_path / "out"))
    assert sealed.entry_ids() is None  # not in the database any more
    scan = IdScan(sealed)
    assert scan.wait(10)
    assert all(f"{i:08x}" in scan for i in ids)


def test_a_pulled_lineage_pushes_again_after_its_archive_moved_out(
        pg_url: str, tmp_path: Path) -> None:
    """A pushed lineage (stored under its files' session ids) whose archive moved out since:
    pushing the same files again stores nothing and finds nothing different."""
    from pg_server import fresh_database

    from journal.pg.transfer import TransferError, pull, push

    url = new_session(pg_url)
    assert rotate_database(url).rotated
    pull(url, tmp_path / "copy")
    other = fresh_database()
    first = push(tmp_path / "copy", other)
    assert len(first.pushed) == 2
    archive = next(PostgresStorage.from_url(e["session"]) for e in first.pushed
                   if "/archive/" in e["file"])
    pg_rotation.move_out(archive, str(tmp_path / "out"))
    assert rows_of(archive) == 0
    again = push(tmp_path / "copy", other)
    assert again.pushed == [] and len(again.skipped) == 2
    # the same size, other bytes: not the archive that moved out
    pulled = next((tmp_path / "copy" / "archive").iterdir())
    packed = pulled.suffix == ".gz"
    raw = gzip.decompress(pulled.read_bytes()) if packed else pulled.read_bytes()
    edited = raw.replace(b"question 3", b"QUESTION 3")
    pulled.write_bytes(gzip.compress(edited) if packed else edited)
    with pytest.raises(TransferError, match="other bytes"):
        push(tmp_path / "copy", other)


def test_rotate_keep_on_a_database(pg_url: str, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from journal.cli import main

    url = new_session(pg_url)
    assert main(["rotate", url, "--keep", "0"]) == 2
    assert "--archive-dir" in capsys.readouterr().err
    assert stream_row(PostgresStorage.from_url(url))["successor"] is None  # type: ignore[index]
    assert main(["rotate", url, "--archive-dir", str(tmp_path / "a"), "--keep", "0",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert list(out["movedOut"]) == [url] and out["movedOut"][url] == out["archive"]
    assert rows_of(PostgresStorage.from_url(url)) == 0


def test_a_rotation_policy_with_keep_moves_archives_out(pg_url: str, tmp_path: Path) -> None:
    from journal import RotationPolicy

    url = session_url(pg_url, str(uuid.uuid4()))
    with Session.create(url, cwd="/w") as session:
        session.rotation_policy = RotationPolicy(archive_dir=str(tmp_path / "a"), keep=0)
        fill(session)
        fill(session, turns=10)
    oldest, newer, _live = lineage_of(url)
    assert rows_of(oldest) == 0 and rows_of(newer) == 0
    assert stream_row(newer)["moved_out_at"] is not None  # type: ignore[index]


def test_a_rotation_policy_with_keep_and_no_archive_dir_still_rotates(pg_url: str) -> None:
    """`keep` without an archive folder (valid for files: archive/ next to the session) does
    not stop a database session rotating: its archives stay in the database, with a warning."""
    from journal import RotationPolicy

    url = session_url(pg_url, str(uuid.uuid4()))
    with Session.create(url, cwd="/w") as session:
        session.rotation_policy = RotationPolicy(keep=0)
        fill(session)
        result = session.rotate()  # nothing since the compaction: not rotated
        assert not result.rotated
    assert len(lineage_of(url)) == 2
    assert rows_of(lineage_of(url)[0]) > 0
    again = rotate_again(url, keep=0)
    assert again.rotated and again.moved_out == {}
    assert any("archive folder" in w for w in again.warnings)


def test_a_reader_of_the_live_session_reads_on_after_it_is_sealed_and_moved_out(
        pg_url: str, tmp_path: Path) -> None:
    """A reader opened before the rotation (a tail, a long export) serves what it had, from
    the file, which also holds the seal appended since."""
    url = new_session(pg_url)
    live = PostgresStorage.from_url(url)
    with live.open_reader() as reader:
        whole = reader.read(0, reader.size)
    with live.open_reader() as reader, live.open_reader() as untouched:
        head = reader.read(0, 100)
        result = rotate_database(url, archive_dir=str(tmp_path / "a"), keep=0)
        assert list(result.moved_out) == [url]
        assert head + reader.read(100, reader.size - 100) == whole
        # at its own size, what was appended since (the seal), as a reader of rows gives it
        assert untouched.read(untouched.size, 1 << 16) == bytes_of(live)[len(whole):]
    assert bytes_of(live).startswith(whole) and is_seal(load(url).entries[-1])


def test_a_moved_out_archive_whose_file_changed_is_not_read(
        pg_url: str, tmp_path: Path) -> None:
    """The file is checked against the SHA-256 recorded as it moved out: other bytes of the
    same length (another session's archive, an edit) are refused, not served."""
    from journal import JournalError

    url = new_session(pg_url)
    result = rotate_database(url, archive_dir=str(tmp_path / "a"), keep=0)
    assert result.archive is not None
    original = gzip.decompress(Path(result.archive).read_bytes())
    Path(result.archive).write_bytes(gzip.compress(original.replace(b"question 3",
                                                                    b"QUESTION 3")))
    with pytest.raises(JournalError, match="no longer holds the bytes"):
        load(url)


def test_an_export_never_replaces_a_file_and_takes_one_holding_its_bytes(
        pg_url: str, tmp_path: Path) -> None:
    """An export finds its file name taken: by another file, it refuses and the rows stay
    (and the file too); by a file holding exactly the session's bytes (an export that
    stopped before it was recorded), it takes that file as its export."""
    from journal import JournalError

    url = new_session(pg_url)
    assert rotate_database(url).rotated
    sealed = PostgresStorage.from_url(url)
    data = bytes_of(sealed)
    target = export_name(sealed, tmp_path / "out")
    target.parent.mkdir()
    target.write_bytes(b"somebody else's")
    with pytest.raises(JournalError, match="already exists"):
        pg_rotation.move_out(sealed, str(tmp_path / "out"))
    assert target.read_bytes() == b"somebody else's" and rows_of(sealed) > 0
    target.write_bytes(gzip.compress(data))  # the leftover of a stopped export
    assert pg_rotation.move_out(sealed, str(tmp_path / "out")) == str(target)
    assert rows_of(sealed) == 0 and bytes_of(sealed) == data


def test_one_archive_that_cannot_move_out_does_not_hold_back_the_others(
        pg_url: str, tmp_path: Path) -> None:
    url = new_session(pg_url)
    assert rotate_database(url).rotated
    assert rotate_again(url).rotated
    oldest, newer, _live = lineage_of(url)
    blocked = export_name(oldest, tmp_path / "a")
    blocked.parent.mkdir()
    blocked.write_bytes(b"in the way")
    result = rotate_again(url, archive_dir=str(tmp_path / "a"), keep=0)
    assert result.rotated
    assert oldest.locator not in result.moved_out and newer.locator in result.moved_out
    assert any(oldest.locator in w and "already exists" in w for w in result.warnings)
    assert rows_of(oldest) > 0 and rows_of(newer) == 0


def test_a_dry_run_with_keep_says_what_would_move_out(pg_url: str, tmp_path: Path) -> None:
    url = new_session(pg_url)
    assert rotate_database(url).rotated
    oldest = PostgresStorage.from_url(url)
    live = pg_rotation.live_storage(oldest)
    with Session.open(url) as session:
        fill(session, turns=10)
    planned = rotate_database(url, archive_dir=str(tmp_path / "a"), keep=0, dry_run=True)
    assert planned.dry_run and set(planned.moved_out) == {oldest.locator, live.locator}
    assert all(p.startswith(str(tmp_path / "a")) for p in planned.moved_out.values())
    assert rows_of(oldest) > 0 and not (tmp_path / "a").exists()


def test_ls_of_a_database_warns_of_a_lineage_counted_in_part(
        pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from journal.cli import main

    url = new_session(pg_url)
    result = rotate_database(url, archive_dir=str(tmp_path / "a"), keep=0)
    assert result.archive is not None
    assert main(["ls", pg_url]) == 0
    assert "Warning" not in capsys.readouterr().err
    Path(result.archive).rename(tmp_path / "elsewhere.gz")
    assert main(["ls", pg_url]) == 0
    said = capsys.readouterr().err
    assert result.archive in said and said.count(url) == 1  # the session named once


def test_a_failure_to_move_archives_out_never_leaves_a_session_on_its_sealed_one(
        pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rotation is committed before archives move out: a database error there is a
    warning, and the session writes on in its successor."""
    from journal.pg.connect import DatabaseError

    url = session_url(pg_url, str(uuid.uuid4()))
    with Session.create(url, cwd="/w") as session:
        fill(session)

        def refused(self: PostgresStorage) -> PostgresStorage | None:
            raise DatabaseError("the database refused a read: statement timeout")

        monkeypatch.setattr(PostgresStorage, "predecessor", refused)
        result = session.rotate(archive_dir=str(tmp_path / "a"), keep=0)
        monkeypatch.undo()
        assert result.rotated and result.moved_out == {}
        assert any("statement timeout" in w for w in result.warnings)
        assert session.session_id == result.successor_id
        session.append_message({"role": "user", "content": "after", "timestamp": 1})
    assert load(url).entries[-1]["customType"] == "journal.successor"  # the seal stays last
    assert load(str(result.successor)).entries[-1]["message"]["content"] == "after"


def test_the_sealing_writer_cannot_append_to_the_sealed_session(pg_url: str) -> None:
    """Sealing moves the fencing epoch on: a writer left on the sealed session (its switch
    to the successor failed, say) has its appends refused, naming the successor, rather
    than written after the seal where the live lineage never reads them."""
    from journal import LeaseLost

    url = new_session(pg_url)
    storage = PostgresStorage.from_url(url)
    lease = storage.lock(5)
    appender = storage.open_appender()
    result, successor, new_lease = pg_rotation.rotate_session(storage, lease)
    assert result.rotated and successor is not None and new_lease is not None
    try:
        with pytest.raises(LeaseLost, match="sealed by a rotation and continues in"):
            appender.commit(b'{"type":"custom","id":"late0001","customType":"x"}\n')
        with pytest.raises(LeaseLost):  # a batch too (the function's path)
            appender.commit(b'{"type":"custom","id":"late0002","customType":"x"}\n'
                            b'{"type":"custom","id":"late0003","customType":"x"}\n')
    finally:
        appender.close()
        new_lease.release()
        lease.release()
    assert load(url).entries[-1]["customType"] == "journal.successor"


def test_a_reader_of_a_replaced_generation_reads_on_after_the_move(
        pg_url: str, tmp_path: Path) -> None:
    """A repair's new generation leaves the one before for readers still on it; moving the
    session out deletes the current generation's rows only, so such a reader reads on."""
    url = new_session(pg_url)
    live = PostgresStorage.from_url(url)
    before = bytes_of(live)
    with live.open_reader() as reader:
        live.publish(before, "repair")  # a new generation (as a repair publishes one)
        assert rotate_database(url, archive_dir=str(tmp_path / "a"), keep=0).moved_out
        assert reader.extent() == len(before)
        assert reader.read(0, reader.size) == before


def test_an_export_takes_no_link_for_its_file_and_syncs_one_it_takes(
        pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from journal import JournalError

    url = new_session(pg_url)
    assert rotate_database(url).rotated
    sealed = PostgresStorage.from_url(url)
    data = bytes_of(sealed)
    elsewhere = tmp_path / "elsewhere.gz"
    elsewhere.write_bytes(gzip.compress(data))
    target = export_name(sealed, tmp_path / "out")
    target.parent.mkdir()
    target.symlink_to(elsewhere)  # holds the bytes, through a link: not taken
    with pytest.raises(JournalError, match="already exists"):
        pg_rotation.move_out(sealed, str(tmp_path / "out"))
    assert rows_of(sealed) > 0
    target.unlink()
    target.write_bytes(gzip.compress(data))  # never synced by whoever wrote it
    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    assert pg_rotation.move_out(sealed, str(tmp_path / "out")) == str(target)
    assert len(synced) >= 2  # the file and its folder, before the rows went


def test_two_moves_of_one_archive_agree_on_its_file(
        pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = new_session(pg_url)
    assert rotate_database(url).rotated
    sealed = PostgresStorage.from_url(url)
    data = bytes_of(sealed)
    real = pg_rotation.connect
    other: list[str] = []

    def meanwhile(conninfo: str, **settings: str) -> psycopg.Connection[object]:
        if not other:  # another process moves it out first
            other.append("")
            other[0] = pg_rotation.move_out(PostgresStorage.from_url(url), str(tmp_path / "d2"))
        return real(conninfo, **settings)

    monkeypatch.setattr(pg_rotation, "connect", meanwhile)
    first = pg_rotation.move_out(sealed, str(tmp_path / "d1"))
    assert first == other[0] == stream_row(sealed)["exported_to"]  # type: ignore[index]
    assert gzip.decompress(Path(first).read_bytes()) == data == bytes_of(sealed)


def test_a_pushed_compressed_archive_moves_out_under_its_own_name(
        pg_url: str, tmp_path: Path) -> None:
    from journal.pg.transfer import push

    folder = tmp_path / "files"
    folder.mkdir()
    path = folder / "s.jsonl"
    with Session.create(str(path), cwd="/w") as session:
        fill(session)
    assert rotate(str(path)).rotated  # archive/s.jsonl.gz
    pushed = push(folder, pg_url)
    archive = next(PostgresStorage.from_url(e["session"]) for e in pushed.pushed
                   if e["file"].endswith(".gz"))
    moved = pg_rotation.move_out(archive, str(tmp_path / "moved"))
    assert moved == str(tmp_path / "moved" / "s.jsonl.gz")


def test_a_dry_run_prints_what_would_move(pg_url: str, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    from journal.cli import main

    url = new_session(pg_url)
    assert rotate_database(url).rotated
    with Session.open(url) as session:
        fill(session, turns=10)
    assert main(["rotate", url, "--archive-dir", str(tmp_path / "a"), "--keep", "0",
                 "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "would move old archive" in out and "  moved" not in out


def test_tail_of_a_moved_out_session_not_here_starts_at_its_successor(
        pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture) -> None:
    """`journal tail OLD-URL` where OLD was moved out to a file not on this machine: what
    can be read of its lineage (the successor on) is printed, with a warning."""
    from journal.cli import main

    url = new_session(pg_url)
    result = rotate_database(url, archive_dir=str(tmp_path / "a"), keep=0)
    assert result.archive is not None
    Path(result.archive).rename(tmp_path / "elsewhere.gz")
    with caplog.at_level(logging.WARNING, logger="journal"):  # whatever set the root's level
        assert main(["tail", url, "-n", "1", "--json"]) == 0
    out = capsys.readouterr()
    assert "after the compaction" in out.out
    assert result.archive in caplog.text and str(result.successor) in caplog.text


def follow_across_a_move(url: str, archive_dir: Path, away: Path | None) -> list[tuple[str, str]]:
    """A follower of `url` that read 'before', a rotation with --keep 0 (its file then moved
    `away`, as if on another machine), 'after' in the successor: the events of the wakes."""
    from journal.tail.follow import Follower

    follower = Follower(url, last=0)
    follower.open()
    list(follower.poll())
    with Session.open(url) as session:
        session.append_custom_entry("before", {"n": 1})
    events = [(e.kind, str((e.entry or {}).get("customType") or e.detail))
              for e in follower.poll()]
    list(follower.poll())  # an idle wake: its reader reads past the size it opened at
    result = rotate_database(url, archive_dir=str(archive_dir), keep=0)
    assert list(result.moved_out) == [url] and result.archive is not None
    if away is not None:
        Path(result.archive).rename(away)
    with Session.open(url) as session:
        session.append_custom_entry("after", {"n": 2})
    for _ in range(3):
        events += [(e.kind, str((e.entry or {}).get("customType") or e.detail))
                   for e in follower.poll()]
    return events


def test_a_follower_reads_on_through_a_move_out(pg_url: str, tmp_path: Path) -> None:
    """A follower whose reader read past its opening size reads the seal from the file the
    session moved out to, and goes on in the successor, with no false truncation."""
    events = follow_across_a_move(new_session(pg_url), tmp_path / "a", None)
    kinds = [k for k, _ in events]
    assert "truncated" not in kinds
    assert [v for k, v in events if k == "entry"][:1] == ["before"]
    assert "after" in [v for k, v in events if k == "entry"] and "rotated" in kinds


def test_a_follower_goes_on_when_the_session_moves_out_to_a_file_not_here(
        pg_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="journal"):
        events = follow_across_a_move(new_session(pg_url), tmp_path / "a",
                                      tmp_path / "away.gz")
    assert "after" in [v for k, v in events if k == "entry"]
    assert "rotated" in [k for k, _ in events]
    assert "not here" in caplog.text


def test_a_reader_that_read_past_its_size_reads_the_seal_after_the_move(
        pg_url: str, tmp_path: Path) -> None:
    url = new_session(pg_url)
    live = PostgresStorage.from_url(url)
    with live.open_reader() as reader:
        with Session.open(url) as session:
            session.append_custom_entry("later", {"n": 1})
        later = reader.read(reader.size, 1 << 16)
        assert b'"later"' in later
        rotate_database(url, archive_dir=str(tmp_path / "a"), keep=0)
        seal = reader.read(reader.size + len(later), 1 << 16)
    assert seal == bytes_of(live)[reader.size + len(later):] and b"journal.successor" in seal


def test_a_session_holds_its_successor_before_the_rotation_commits(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """No other writer can take the successor between the commit and the rotating session's
    lease on it (it would be left on the sealed session, which takes no more appends)."""
    held_when_created: list[object] = []
    real = PostgresStorage.create_in

    def create_in(self: PostgresStorage, conn: psycopg.Connection[object], data: bytes) -> None:
        held_when_created.append(self.holder())
        real(self, conn, data)

    url = session_url(pg_url, str(uuid.uuid4()))
    with Session.create(url, cwd="/w") as session:
        fill(session)
        monkeypatch.setattr(PostgresStorage, "create_in", create_in)
        assert session.rotate().rotated
        monkeypatch.undo()
        assert held_when_created and held_when_created[0] is not None
        session.append_message({"role": "user", "content": "on", "timestamp": 1})
    row = stream_row(PostgresStorage.from_url(url))
    assert row is not None
    with psycopg.connect(pg_url) as conn:
        holder = conn.execute("SELECT holder_host, holder_pid, holder_since, holder_backend "
                              "FROM journal.streams WHERE session = %s",
                              (PostgresStorage.from_url(url).session,)).fetchone()
    assert holder == (None, None, None, None)  # a sealed session names no writer


def test_rows_a_repair_left_go_at_the_next_move(pg_url: str, tmp_path: Path) -> None:
    url = new_session(pg_url)
    first = PostgresStorage.from_url(url)
    first.publish(bytes_of(first), "repair")  # a new generation; the one before stays
    assert rotate_database(url, archive_dir=str(tmp_path / "a"), keep=0).moved_out
    assert rows_of(first) > 0  # the replaced generation, for readers still on it
    assert rotate_again(url, archive_dir=str(tmp_path / "a"), keep=0).rotated
    assert rows_of(first) == 0


def test_a_session_writes_on_in_its_successor_fenced(pg_url: str) -> None:
    """After a rotation the session's appends to its successor carry the successor's lease:
    once another writer took the successor over (the lease connection lost), they are
    refused, never interleaved."""
    from journal import LeaseLost

    url = session_url(pg_url, str(uuid.uuid4()))
    session = Session.create(url, cwd="/w")
    try:
        fill(session)
        assert session.rotate().rotated
        successor = session.path
        live = PostgresStorage.from_url(successor)
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(holder_backend) FROM journal.streams "
                         "WHERE session = %s", (live.session,))
        with Session.open(successor) as other:  # takes the lease over: a newer epoch
            other.append_message({"role": "user", "content": "the other", "timestamp": 1})
        with pytest.raises(LeaseLost):
            session.append_message({"role": "user", "content": "late", "timestamp": 2})
    finally:
        try:
            session.close()
        except Exception:  # noqa: BLE001 - the lease connection was terminated
            pass
    assert load(successor).entries[-1]["message"]["content"] == "the other"


def test_an_interruption_while_archiving_leaves_the_session_in_its_successor(
        pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = session_url(pg_url, str(uuid.uuid4()))
    with Session.create(url, cwd="/w") as session:
        fill(session)

        def interrupted(storage: PostgresStorage, directory: str) -> str:
            raise KeyboardInterrupt

        monkeypatch.setattr(pg_rotation, "export_archive", interrupted)
        with pytest.raises(KeyboardInterrupt):
            session.rotate(archive_dir=str(tmp_path / "a"), keep=0)
        monkeypatch.undo()
        assert session.path != url  # it carries on in the successor
        session.append_message({"role": "user", "content": "on", "timestamp": 1})
    assert load(url).entries[-1]["customType"] == "journal.successor"


def test_a_follower_goes_on_past_two_successors_moved_out_to_files_not_here(
        pg_url: str, tmp_path: Path) -> None:
    from journal.tail.follow import Follower

    url = new_session(pg_url)
    follower = Follower(url, last=0)
    follower.open()
    list(follower.poll())
    for _ in range(2):  # two rotations while the follower sleeps, their files elsewhere
        result = rotate_again(url, archive_dir=str(tmp_path / "a"), keep=0)
        assert result.archive is not None and result.moved_out
        for moved in result.moved_out.values():
            if Path(moved).exists():
                Path(moved).rename(tmp_path / (Path(moved).name + ".away"))
    with Session.open(url) as session:
        session.append_custom_entry("after", {"n": 2})
    seen: list[str] = []
    for _ in range(3):
        seen += [str((e.entry or {}).get("customType")) for e in follower.poll()
                 if e.kind == "entry"]
    assert "after" in seen


def test_a_moved_out_archive_is_not_replaced(pg_url: str, tmp_path: Path) -> None:
    from journal import JournalError

    url = new_session(pg_url)
    assert rotate_database(url, archive_dir=str(tmp_path / "a"), keep=0).moved_out
    sealed = PostgresStorage.from_url(url)
    with pytest.raises(JournalError, match="not replaced"):
        sealed.publish(b'{"type":"session","version":3,"id":"x","timestamp":"t",'
                       b'"cwd":"/"}\n', "repair")
    assert rows_of(sealed) == 0 and load(url).entries


def test_rows_a_repair_left_go_also_for_an_archive_kept_by_keep(
        pg_url: str, tmp_path: Path) -> None:
    """An archive moved out before and now within the newest `keep` loses its leftovers
    too."""
    url = new_session(pg_url)
    first = PostgresStorage.from_url(url)
    first.publish(bytes_of(first), "repair")
    assert rotate_database(url, archive_dir=str(tmp_path / "a"), keep=0).moved_out
    assert rows_of(first) > 0
    assert rotate_again(url, archive_dir=str(tmp_path / "a"), keep=5).rotated
    assert rows_of(first) == 0


def test_a_switch_that_fails_leaves_the_successor_free(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Interrupted while it reads its successor, the session is closed and holds nothing:
    another writer opens the successor at once."""
    import journal.session as session_module

    url = session_url(pg_url, str(uuid.uuid4()))
    session = Session.create(url, cwd="/w")
    fill(session)
    real = session_module.resume

    def interrupted(target: object, *args: object, **kwargs: object) -> object:
        if isinstance(target, PostgresStorage) and target.session != session.session_id:
            raise KeyboardInterrupt
        return real(target, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(session_module, "resume", interrupted)
    with pytest.raises(KeyboardInterrupt) as caught:  # its traceback kept, as a caller may
        session.rotate()
    monkeypatch.undo()
    assert caught.traceback and session.closed
    session.close()
    successor = lineage_of(url)[-1]
    assert successor.holder() is None
    with Session.open(successor.locator, lock_timeout=0) as other:
        other.append_message({"role": "user", "content": "on", "timestamp": 1})


def test_one_archive_that_cannot_be_read_does_not_hold_back_the_others(
        pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from journal.pg.connect import DatabaseError

    url = new_session(pg_url)
    assert rotate_database(url).rotated
    assert rotate_again(url).rotated
    oldest, newer, _live = lineage_of(url)
    real, real_create = pg_rotation.stream_row, PostgresStorage.create_in
    rotated: list[bool] = []

    def refused(storage: PostgresStorage) -> object:
        if rotated and storage.session == oldest.session:  # once archives move out
            raise DatabaseError("the database refused a read: statement timeout")
        return real(storage)

    def create_in(self: PostgresStorage, conn: psycopg.Connection[object], data: bytes) -> None:
        real_create(self, conn, data)
        rotated.append(True)

    monkeypatch.setattr(pg_rotation, "stream_row", refused)
    monkeypatch.setattr(PostgresStorage, "create_in", create_in)
    result = rotate_again(url, archive_dir=str(tmp_path / "a"), keep=0)
    monkeypatch.undo()
    assert result.rotated and newer.locator in result.moved_out
    assert any(oldest.locator in w for w in result.warnings)
    assert rows_of(oldest) > 0 and rows_of(newer) == 0


def test_keep_below_zero_is_refused_before_a_session_rotates(pg_url: str) -> None:
    url = session_url(pg_url, str(uuid.uuid4()))
    with Session.create(url, cwd="/w") as session:
        fill(session)
        with pytest.raises(ValueError, match="0 or more"):
            session.rotate(keep=-1)
        assert session.path == url
    assert stream_row(PostgresStorage.from_url(url))["successor"] is None  # type: ignore[index]


def test_a_connection_lost_during_the_rotation_says_it_may_have_been_committed(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from journal.pg.connect import DatabaseError

    url = new_session(pg_url)
    real = PostgresStorage.create_in

    def lost(self: PostgresStorage, conn: psycopg.Connection[object], data: bytes) -> None:
        real(self, conn, data)
        conn.close()  # the reply of the commit never comes
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(PostgresStorage, "create_in", lost)
    with pytest.raises(DatabaseError, match="may have been committed"):
        rotate_database(url)


def test_a_lost_reply_to_the_move_says_the_file_must_be_kept(
        pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from contextlib import contextmanager

    from journal.pg.connect import DatabaseError

    url = new_session(pg_url)
    assert rotate_database(url).rotated
    sealed = PostgresStorage.from_url(url)
    real = pg_rotation.connect

    class LostReply:
        """A connection whose transaction commits and whose reply never comes."""

        def __init__(self, conn: psycopg.Connection[object]) -> None:
            self.conn = conn

        def __getattr__(self, name: str) -> object:
            return getattr(self.conn, name)

        @contextmanager
        def transaction(self) -> Iterator[None]:
            with self.conn.transaction():
                yield
            self.conn.close()
            raise psycopg.OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(pg_rotation, "connect",
                        lambda conninfo, **kw: LostReply(real(conninfo, **kw)))
    with pytest.raises(DatabaseError, match="may have been committed: keep"):
        pg_rotation.move_out(sealed, str(tmp_path / "out"))
    monkeypatch.undo()
    assert rows_of(sealed) == 0  # it was: the file is the only copy


def entries_seen(follower: object, wakes: int = 4,
                 kinds: list[str] | None = None) -> list[str]:
    """The custom types of the entries a follower delivers in `wakes` wake-ups (the kinds of
    all its events added to `kinds`)."""
    seen: list[str] = []
    for _ in range(wakes):
        for event in follower.poll():  # type: ignore[attr-defined]
            if kinds is not None:
                kinds.append(event.kind)
            if event.kind == "entry":
                seen.append(str((event.entry or {}).get("customType")))
    return seen


def following_from_its_end(url: str) -> Any:
    """A follower of the session `url`, opened at its end and woken once."""
    from journal.tail.follow import Follower

    follower = Follower(url, last=0)
    follower.open()
    list(follower.poll())
    return follower


@pytest.mark.parametrize(("rows_gone", "file_here"), [(True, True), (False, False),
                                                      (True, False)])
def test_a_follower_of_a_replaced_generation_reads_on_after_the_move(
        pg_url: str, tmp_path: Path, rows_gone: bool, file_here: bool) -> None:
    """A follower still on the generation a repair replaced, the session moved out since:
    it reads the current generation (from the file) once the rows it read are gone, or goes
    on in the successor where the file is not here."""
    url = new_session(pg_url)
    first = PostgresStorage.from_url(url)
    follower = following_from_its_end(url)
    first.publish(bytes_of(first), "repair")
    result = rotate_database(url, archive_dir=str(tmp_path / "a"), keep=0)
    assert result.archive is not None
    if rows_gone:
        assert rotate_again(url, archive_dir=str(tmp_path / "a"), keep=5).rotated
        assert rows_of(first) == 0  # the generation the follower read is gone
    if not file_here:
        Path(result.archive).rename(tmp_path / "away.gz")
    with Session.open(url) as session:
        session.append_custom_entry("after", {"n": 1})
    kinds: list[str] = []
    assert "after" in entries_seen(follower, kinds=kinds)
    assert "truncated" not in kinds  # a replacement, not a truncation


def test_a_follower_of_a_generation_replaced_twice_reports_a_replacement(
        pg_url: str) -> None:
    """Two replacements in a row delete the rows of the generation a follower was still on:
    that is a replacement to read on from, not a truncation to 0 bytes (fuzz 44)."""
    url = new_session(pg_url)
    storage = PostgresStorage.from_url(url)
    follower = following_from_its_end(url)
    storage.publish(bytes_of(storage), "repair")
    storage.publish(bytes_of(storage), "repair")
    with Session.open(url) as session:
        session.append_custom_entry("after", {"n": 1})
    kinds: list[str] = []
    assert entries_seen(follower, kinds=kinds) == ["after"]
    assert "truncated" not in kinds
    assert "replaced" in kinds


def test_a_follower_opened_as_its_session_is_replaced_twice_opens_it_again(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two replacements between a follower's opening of the session and its placing of the
    start delete the generation it opened (review 46): it opens the session again."""
    import importlib

    tail_follow = importlib.import_module("journal.tail.follow")  # not journal.tail's follow()
    url = new_session(pg_url)
    storage = PostgresStorage.from_url(url)
    real = tail_follow.open_regular
    replaced: list[int] = []

    def replaced_as_opened(*args: object) -> object:
        opened = real(*args)  # type: ignore[arg-type]
        if not replaced:
            replaced.append(1)
            storage.publish(bytes_of(storage), "repair")
            storage.publish(bytes_of(storage), "repair")
        return opened

    monkeypatch.setattr(tail_follow, "open_regular", replaced_as_opened)
    follower = tail_follow.Follower(url, last=0)
    follower.open()
    assert replaced
    with Session.open(url) as session:
        session.append_custom_entry("after", {"n": 1})
    assert entries_seen(follower) == ["after"]


def test_a_switch_interrupted_while_closing_the_old_appender_frees_the_successor(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from journal.pg.storage import PostgresAppender

    url = session_url(pg_url, str(uuid.uuid4()))
    session = Session.create(url, cwd="/w")
    fill(session)
    real = PostgresAppender.close
    calls: list[int] = []

    def interrupted(self: PostgresAppender) -> None:
        calls.append(1)
        real(self)
        if len(calls) == 1:
            raise KeyboardInterrupt

    monkeypatch.setattr(PostgresAppender, "close", interrupted)
    with pytest.raises(KeyboardInterrupt) as caught:
        session.rotate()
    monkeypatch.undo()
    assert caught.traceback
    session.close()
    successor = lineage_of(url)[-1]
    assert successor.session != PostgresStorage.from_url(url).session
    assert successor.holder() is None


def test_keep_below_zero_is_refused_by_a_policy_and_before_a_file_rotates(
        tmp_path: Path) -> None:
    from journal import RotationPolicy

    with pytest.raises(ValueError, match="0 or more"):
        RotationPolicy(keep=-1)
    path = tmp_path / "s.jsonl"
    with Session.create(str(path), cwd="/w") as session:
        fill(session)
    before = path.read_bytes()
    with pytest.raises(ValueError, match="0 or more"):
        rotate(str(path), keep=-1)
    for wrong in ("2", 2.0, True):  # a number read from a config file, say
        with pytest.raises(TypeError, match="whole number"):
            RotationPolicy(keep=wrong)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="whole number"):
            rotate(str(path), keep=wrong)  # type: ignore[arg-type]
    assert path.read_bytes() == before and not (tmp_path / "archive").exists()


def test_prune_keeps_an_archive_moved_out_of_the_database(pg_url: str, tmp_path: Path) -> None:
    """The moved-out file is the only copy of its lines: `journal prune` of the archive folder
    keeps it (a sealed file whose successor is not there), saying why."""
    from datetime import UTC, datetime, timedelta

    from journal.catalog import prune

    url = new_session(pg_url)
    result = rotate_database(url, archive_dir=str(tmp_path / "a"), keep=0)
    assert result.archive is not None and rows_of(PostgresStorage.from_url(url)) == 0
    report = prune([str(tmp_path / "a")], timedelta(days=30),
                   now=datetime.now(UTC) + timedelta(days=90))
    assert [item.action for item in report.items] == ["skip"]
    assert "successor is not here" in str(report.items[0].reason)
    assert Path(result.archive).exists() and load(url).entries


def test_leftovers_are_only_older_generations(pg_url: str, tmp_path: Path) -> None:
    """Rows of a moved-out archive's current generation (written past the seal, as a
    database at schema version 3 let a writer do) are in no file: the next move-out pass
    leaves them."""
    url = new_session(pg_url)
    assert rotate_database(url, archive_dir=str(tmp_path / "a"), keep=0).moved_out
    sealed = PostgresStorage.from_url(url)
    with psycopg.connect(sealed.conninfo) as conn:
        conn.execute("INSERT INTO journal.entries (stream, generation, position, byte_offset, "
                     "line) SELECT id, generation, entries, size, '{}' FROM journal.streams "
                     "WHERE session = %s", (sealed.session,))
    assert rows_of(sealed) == 1
    assert rotate_again(url, archive_dir=str(tmp_path / "a"), keep=0).rotated
    assert rows_of(sealed) == 1


@pytest.mark.parametrize("fenced", [True, False], ids=["new-lease", "unfenced"])
def test_a_sealed_session_takes_no_more_lines_from_any_writer(pg_url: str,
                                                             fenced: bool) -> None:
    """A writer that takes the lease of a sealed session after the seal (its epoch is the
    current one), or writes without a lease, is refused by the server, naming the successor:
    nothing lands after the seal, where the live lineage never reads it."""
    from journal import SessionSealed

    url = new_session(pg_url)
    result = rotate_database(url)
    assert result.rotated and result.successor is not None
    storage = PostgresStorage.from_url(url)
    before = load(url).entries
    lease = storage.lock(5) if fenced else None
    appender = storage.open_appender()
    assert (appender.epoch is not None) is fenced
    try:
        with pytest.raises(SessionSealed, match="continues in") as caught:
            appender.commit(b'{"type":"custom","id":"late0001","customType":"x"}\n')
        assert caught.value.successor == result.successor
        with pytest.raises(SessionSealed):  # a batch too (the function's path)
            appender.commit(b'{"type":"custom","id":"late0002","customType":"x"}\n'
                            b'{"type":"custom","id":"late0003","customType":"x"}\n')
        with pytest.raises(SessionSealed):  # and a compaction (the function, resume offsets)
            appender.commit(b'{"type":"compaction","id":"late0004","summary":"s",'
                            b'"firstKeptEntryId":"late0001","tokensBefore":1}\n')
    finally:
        appender.close()
        if lease is not None:
            lease.release()
    after = load(url).entries
    assert after == before and is_seal(after[-1])


def test_a_pull_can_leave_out_an_archive_whose_file_is_not_here(
        pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """On a machine without the moved-out archive's file, a pull fails writing nothing and
    says how to pull the rest; with --skip-elsewhere it writes the rest, warning of what it
    left out."""
    import json

    from journal.cli import main

    url = new_session(pg_url)
    result = rotate_database(url, archive_dir=str(tmp_path / "a"), keep=0)
    assert result.archive is not None and result.successor is not None
    Path(result.archive).rename(tmp_path / "elsewhere.gz")
    out = tmp_path / "pulled"
    assert main(["pull", result.successor, str(out)]) == 2
    said = capsys.readouterr().err
    assert result.archive in said and "--skip-elsewhere" in said
    assert not any(p.is_file() for p in out.rglob("*"))

    assert main(["pull", result.successor, str(out), "--skip-elsewhere", "--json"]) == 0
    done = capsys.readouterr()
    report = json.loads(done.out)
    assert [row["elsewhere"] for row in report["skipped"]] == [result.archive]
    assert report["skipped"][0]["session"] == url
    assert "left out" in done.err and result.archive in done.err
    written = [p for p in out.rglob("*") if p.is_file()]
    assert [str(p) for p in written] == [row["file"] for row in report["files"]]
    assert len(written) == 1 and not Path(report["skipped"][0]["file"]).exists()
    with PostgresStorage.from_url(result.successor).open_reader() as reader:
        assert written[0].read_bytes() == reader.stream.read()


def rotation_outrun(url: str, times: int, monkeypatch: pytest.MonkeyPatch
                    ) -> tuple[list[str], list[tuple[threading.Thread, list[BaseException]]]]:
    """The ids of the lines an appender without the lease (not fenced) commits, from another
    thread, after each of the first `times` readings of the session by a rotation (as it
    plans the successor); and, for each line that still waited after 2 s (the rotation went
    on meanwhile), its thread and what its commit raised once it ended."""
    from journal import Durability, codec, model
    from journal.pg import rotation as pg_rotation

    real = pg_rotation.plan_successor
    ids: list[str] = []
    waited: list[tuple[threading.Thread, list[BaseException]]] = []

    def commit(line: bytes, raised: list[BaseException]) -> None:
        appender = as_storage(url).open_appender(Durability.always())
        try:
            appender.commit(line)
        except BaseException as e:  # handed to the test
            raised.append(e)
        finally:
            appender.close()

    def meanwhile(*args: object, **kw: object) -> object:
        if len(ids) < times:
            ids.append(f"unleased{len(ids)}")
            leaf = Tree(load(url).entries).leaf_id
            raised: list[BaseException] = []
            thread = threading.Thread(target=commit, daemon=True, args=(
                codec.encode(model.custom_entry(ids[-1], leaf, "x")), raised))
            thread.start()
            thread.join(2)
            if thread.is_alive():
                waited.append((thread, raised))
            else:
                assert raised == []
        return real(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(pg_rotation, "plan_successor", meanwhile)
    return ids, waited


def test_a_line_appended_without_the_lease_during_a_rotation_makes_it_read_again(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """An appender without the lease commits a line after the rotation read the session: the
    successor would leave that acknowledged line out, so the rotation reads the session again
    and carries the line over."""
    url = new_session(pg_url)
    ids, waited = rotation_outrun(url, 1, monkeypatch)
    result = rotate_database(url)
    assert ids == ["unleased0"] and waited == []
    assert result.rotated and result.successor is not None
    assert load(result.successor).entries[-1]["id"] == "unleased0"
    with as_storage(url).open_reader() as reader:  # sealed after the line
        assert b'"unleased0"' in reader.stream.read()


def test_a_rotation_outrun_by_an_appender_without_the_lease_holds_it_off_the_last_time(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A line committed without the lease after each of the rotation's readings: the last
    reading holds the session's row until the rotation committed, so the line sent then waits
    for it, and is refused as one for a sealed session (naming its successor); the lines
    before it are carried over."""
    from journal import SessionSealed
    from journal.pg.rotation import CHANGED_TRIES

    url = new_session(pg_url)
    ids, waited = rotation_outrun(url, CHANGED_TRIES, monkeypatch)
    result = rotate_database(url)
    monkeypatch.undo()
    assert result.rotated and result.successor is not None and len(ids) == CHANGED_TRIES
    [(thread, raised)] = waited
    thread.join(10)
    assert not thread.is_alive()
    [refused] = raised
    assert isinstance(refused, SessionSealed) and result.successor_id in str(refused)
    carried = [e["id"] for e in load(result.successor).entries]
    assert carried[-(CHANGED_TRIES - 1):] == ids[:-1] and ids[-1] not in carried
    with as_storage(url).open_reader() as reader:  # sealed before it, without it
        sealed = reader.stream.read()
    assert f'"{ids[-2]}"'.encode() in sealed and f'"{ids[-1]}"'.encode() not in sealed


def test_opening_the_first_of_a_twice_rotated_session_names_every_hop(pg_url: str,
                                                                      tmp_path: Path) -> None:
    """`followed` lists each sealed session passed on the way, as for a file (the file
    session the same steps make, alongside)."""
    url = new_session(pg_url)
    hops = [PostgresStorage.from_url(url).locator]
    for _ in range(2):
        result = rotate_database(url)
        assert result.rotated and result.successor_id is not None
        successor = PostgresStorage.from_url(session_url(pg_url, result.successor_id))
        hops.append(successor.locator)
        with Session.open(url) as session:
            fill(session)
    with Session.open(url) as session:
        assert session.session_id == result.successor_id
        assert session.followed == hops[:-1]

    with Session.create(tmp_path, cwd="/work") as file_session:
        fill(file_session)
        paths = [file_session.path]
    for _ in range(2):
        rotated = rotate(paths[0])
        assert rotated.rotated and rotated.successor is not None
        paths.append(rotated.successor)
        with Session.open(paths[0]) as file_session:
            fill(file_session)
    with Session.open(paths[0]) as file_session:
        assert file_session.followed == paths[:-1]


def test_a_sealed_session_is_not_replaced(pg_url: str) -> None:
    """A replacement of a session a rotation sealed (its lease is free, so the lease's lock
    does not stop it) would put lines after its seal, or drop the seal while the row names a
    successor: refused, nothing changed."""
    from journal import SessionSealed

    url = new_session(pg_url)
    assert rotate_database(url).rotated
    sealed = PostgresStorage.from_url(url)
    before = bytes_of(sealed)
    extra = b'{"type":"custom","id":"late0001","customType":"x"}\n'
    with pytest.raises(SessionSealed, match="nor is it replaced"):
        sealed.publish(before + extra, "repair", based_on=len(before))
    with pytest.raises(SessionSealed):
        sealed.publish(before[:before.index(b"\n") + 1], "repair")
    assert bytes_of(sealed) == before and is_seal(load(url).entries[-1])


LONG = 66
"""Rotations of a long lineage: more than the 64 hops a lineage was once followed for."""


def grow_and_rotate(session: Session, turn: int) -> None:
    """A few turns, a compaction keeping the last of them, and a rotation."""
    last = None
    for i in range(6):
        last = session.append_message({"role": "user", "content": f"turn {turn} {i} "
                                       + "w" * 300, "timestamp": 1})
    assert last is not None
    session.append_compaction("summary", last, 100)
    assert session.rotate().rotated


def rotated_long(url: str) -> str:
    """A session made at `url` and rotated LONG times: its live session's URL."""
    with Session.create(url, cwd="/") as session:
        for turn in range(LONG):
            grow_and_rotate(session, turn)
        return session.path


def test_a_session_rotated_more_than_64_times_opens_by_its_first_id(pg_url: str) -> None:
    """A session rotated nightly is opened by the id it started with (a worker's fixed
    name). Following its successors once stopped after 64 as "a loop?", so after two months
    Session.open, `journal append`, `rotate` and `repair` refused it; a lineage of files
    opened from its first file all along. A loop is found by the sessions seen now."""
    first = session_url(pg_url, "long-lineage")
    live = rotated_long(first)
    with Session.open(first) as reopened:
        assert reopened.path == live
        reopened.append_message({"role": "user", "content": "in the live one", "timestamp": 1})
    assert load(live).entries[-1]["message"]["content"] == "in the live one"
    again = rotate(first)  # followed to the live one, which has nothing to rotate
    assert not again.rotated and again.path == live, again


def test_keep_moves_out_what_is_beyond_it_in_a_lineage_of_more_than_64(
        pg_url: str, tmp_path: Path) -> None:
    """`rotate --keep N` looked at the newest 64 archives only: with 66 and keep 64, the two
    oldest were never moved out (nor, with any keep of 64 or more, anything)."""
    first = session_url(pg_url, "long-keep")
    live = rotated_long(first)
    result = rotate_database(live, archive_dir=str(tmp_path / "archive"), keep=64)
    oldest = stream_row(PostgresStorage.from_url(first))
    assert oldest is not None and oldest["moved_out_at"] is not None, result
    assert len(result.moved_out) == LONG - 64, result


def test_successors_that_lead_back_are_a_loop_said_as_one(pg_url: str) -> None:
    """Two sessions each naming the other its successor (an edit made out of band): opening
    either is an error naming the loop, not a wait or a walk without end."""
    for name in ("loop-a", "loop-b"):
        with Session.create(session_url(pg_url, name), cwd="/") as session:
            session.append_message({"role": "user", "content": name, "timestamp": 1})
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute("UPDATE journal.streams SET successor = CASE session WHEN 'loop-a' "
                      "THEN 'loop-b' ELSE 'loop-a' END WHERE session IN ('loop-a', 'loop-b')")
    with pytest.raises(Exception, match="lead back to loop-a"):
        Session.open(session_url(pg_url, "loop-a"))
