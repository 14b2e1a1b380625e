"""Push file sessions (with their lineage) into a database and pull them back: the files come
back byte for byte; a push is all or nothing; a pull never overwrites."""

from __future__ import annotations

import gzip
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("psycopg", reason="the PostgreSQL extra is not installed")
from third_party import pi_path  # noqa: E402

from journal import Session, load  # noqa: E402
from journal.cli import main  # noqa: E402
from journal.pg.connect import connect  # noqa: E402
from journal.pg.transfer import TransferError, pull, push  # noqa: E402
from journal.pg.url import session_url  # noqa: E402

PI = ["all-types.jsonl", "before-compaction.jsonl", "large-session.jsonl"]


def files_under(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and (p.name.endswith(".jsonl") or p.name.endswith(".jsonl.gz"))}


def count_streams(pg_url: str) -> int:
    with connect(pg_url) as conn:  # the schema made if it is not yet
        row = conn.execute("SELECT count(*) FROM journal.streams").fetchone()
    return int(row[0]) if row is not None else -1


def fill(session: Session, turns: int, tag: str) -> None:
    session.append_model_change("anthropic", "claude-x")
    kept = None
    for i in range(turns):
        entry = session.append_message({"role": "user", "content": f"{tag} {i} " + "y" * 300,
                                        "timestamp": 1})
        if i == turns - 3:
            kept = entry
    session.append_compaction(f"summary {tag}", kept, 500)


def rotated_lineage(folder: Path) -> str:
    """A live file continuing two archives (one compressed, one not)."""
    folder.mkdir()
    with Session.create(str(folder), cwd="/w") as session:
        fill(session, 40, "one")
        assert session.rotate().rotated
        fill(session, 40, "two")
        assert session.rotate(compress=False).rotated
        session.append_message({"role": "user", "content": "live", "timestamp": 1})
        return session.path


@pytest.mark.parametrize("name", PI)
def test_pi_fixtures_round_trip_byte_for_byte(pg_url: str, tmp_path: Path, name: str) -> None:
    source = pi_path(name)
    result = push(str(source), pg_url)
    assert len(result.pushed) == 1
    header = load(str(source)).header
    assert header is not None
    url = session_url(pg_url, header["id"])
    pulled = pull(url, tmp_path / "out")
    assert [Path(f["file"]).name for f in pulled.files] == [name]
    assert (tmp_path / "out" / name).read_bytes() == source.read_bytes()


def test_a_rotated_lineage_round_trips_and_stays_a_lineage(pg_url: str, tmp_path: Path) -> None:
    live = rotated_lineage(tmp_path / "src")
    original = files_under(tmp_path / "src")
    assert len(original) == 3 and any(k.endswith(".gz") for k in original)
    result = push(live, pg_url)
    assert len(result.pushed) == 3
    live_id = load(live).header["id"]  # type: ignore[index]
    # in the database, the first session leads to the live one
    first_id = load(str(next(p for p in (tmp_path / "src" / "archive").iterdir()
                             if p.name.endswith(".gz")))).header["id"]  # type: ignore[index]
    with Session.open(session_url(pg_url, first_id)) as session:
        assert session.session_id == live_id
    pull(session_url(pg_url, first_id), tmp_path / "by-session")
    assert files_under(tmp_path / "by-session") == original
    pull(pg_url, tmp_path / "whole")
    assert files_under(tmp_path / "whole") == original


def test_a_folder_round_trips(pg_url: str, tmp_path: Path) -> None:
    rotated_lineage(tmp_path / "src")
    with Session.create(str(tmp_path / "src"), cwd="/w") as other:
        other.append_message({"role": "user", "content": "another session", "timestamp": 1})
    (tmp_path / "src" / "notes.txt").write_text("not a session")
    original = files_under(tmp_path / "src")
    assert len(push(str(tmp_path / "src"), pg_url).pushed) == 4
    pull(pg_url, tmp_path / "out")
    assert files_under(tmp_path / "out") == original


def test_push_again_skips_and_other_bytes_are_refused_the_rest_pushed(
        pg_url: str, tmp_path: Path) -> None:
    """A folder holding a session the database has other bytes of, and a new one: the first
    is refused, naming what differs, and left as it is; the new one is stored."""
    from journal.pg.transfer import PushRefused

    live = rotated_lineage(tmp_path / "src")
    push(live, pg_url)
    again = push(live, pg_url)
    assert again.pushed == [] and len(again.skipped) == 3
    changed = tmp_path / "changed.jsonl"
    data = Path(live).read_bytes()
    changed.write_bytes(data.replace(b'"live"', b'"LIVE"'))
    fresh = tmp_path / "fresh"
    with Session.create(str(fresh), cwd="/w") as session:
        session.append_message({"role": "user", "content": "new", "timestamp": 1})
    os.rename(changed, fresh / changed.name)
    before = count_streams(pg_url)
    with pytest.raises(PushRefused, match=r"changed.jsonl: the database holds other bytes: "
                       r"line \d+ \(at byte [\d,]+\) differs") as refused:
        push(str(fresh), pg_url)
    assert sorted((Path(row["file"]).name == changed.name, row["action"])
                  for row in refused.value.result.sessions) == [(False, "new"), (True, "refused")]
    assert count_streams(pg_url) == before + 1  # the new session, alone
    assert load(session_url(pg_url, load(live).header["id"])).end == len(data)  # type: ignore[index]


def test_a_pull_refused_leaves_nothing(pg_url: str, tmp_path: Path) -> None:
    live = rotated_lineage(tmp_path / "src")
    push(live, pg_url)
    out = tmp_path / "out"
    out.mkdir()
    (out / Path(live).name).write_text("mine")
    with pytest.raises(TransferError, match="already exists"):
        pull(pg_url, out)
    assert sorted(p.name for p in out.rglob("*")) == [Path(live).name]
    assert (out / Path(live).name).read_text() == "mine"


def test_push_refuses_a_damaged_archive_and_writes_nothing(pg_url: str, tmp_path: Path) -> None:
    """An archive whose deflate data is damaged (gzip raises zlib.error, not an OSError):
    refused as one, nothing written."""
    session = (b'{"type":"session","version":3,"id":"s1","timestamp":"t","cwd":"/"}\n'
               + b"".join(b'{"type":"custom","id":"%08x","parentId":null,"timestamp":"t",'
                          b'"customType":"x"}\n' % i for i in range(1, 200)))
    data = bytearray(gzip.compress(session, mtime=0))
    for i in range(12, 40):  # past the 10-byte gzip header
        data[i] ^= 0x5A
    archive = tmp_path / "old.jsonl.gz"
    archive.write_bytes(bytes(data))
    with pytest.raises(TransferError, match="old.jsonl.gz: not a readable gzip archive"):
        push(str(archive), pg_url)
    assert count_streams(pg_url) == 0


def test_push_and_pull_commands(pg_url: str, tmp_path: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    live = rotated_lineage(tmp_path / "src")
    assert main(["push", live, pg_url, "--json"]) == 0
    pushed = json.loads(capsys.readouterr().out)
    assert len(pushed["pushed"]) == 3
    assert main(["pull", pg_url, str(tmp_path / "out")]) == 0
    capsys.readouterr()
    assert files_under(tmp_path / "out") == files_under(tmp_path / "src")
    assert main(["pull", pg_url, str(tmp_path / "out")]) == 0  # the same bytes: all there
    assert capsys.readouterr().out.splitlines()[-1] == "0 file(s) written, 3 already there"
    Path(live.replace(str(tmp_path / "src"), str(tmp_path / "out"))).write_text("other\n")
    assert main(["pull", pg_url, str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.splitlines()  # the progress line, then the error
    assert err[-1].startswith("Error: ") and "already exists" in err[-1]
    assert main(["push", str(tmp_path / "missing.jsonl"), pg_url]) == 2
    assert capsys.readouterr().err.splitlines()[-1].startswith("Error: ")


def test_ls_lists_the_databases_lineages(pg_url: str, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    live = rotated_lineage(tmp_path / "src")
    push(live, pg_url)
    with Session.create(session_url(pg_url, "other"), cwd="/w") as session:
        session.append_message({"role": "user", "content": "x", "timestamp": 1})
        assert main(["ls", pg_url, "--json"]) == 0
        rows = {row["session"]: row for row in json.loads(capsys.readouterr().out)}
        live_id = load(live).header["id"]  # type: ignore[index]
        assert set(rows) == {live_id, "other"}
        assert rows[live_id]["sessions"] == 3 and rows[live_id]["holder"] is None
        assert rows[live_id]["file"] == Path(live).name
        holder = rows["other"]["holder"]
        assert holder["pid"] == os.getpid() and holder["host"]
        # its `since`, as docs/cli.md says (it was missing), in the store's times
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", holder["since"]), holder
        assert rows["other"]["state"] == "locked" and rows["other"]["holderPid"] == os.getpid()
        assert main(["ls", pg_url]) == 0
        assert f"\tlocked ({os.getpid()} on " in capsys.readouterr().out
    assert main(["ls", pg_url, "--json"]) == 0
    assert {row["state"] for row in json.loads(capsys.readouterr().out)} == {"live"}


def test_a_database_rotation_pulls_as_a_file_lineage(pg_url: str, tmp_path: Path) -> None:
    from journal import lineage
    from journal.pg.rotation import rotate_database

    folder = tmp_path / "src" / "team"
    folder.mkdir(parents=True)
    with Session.create(str(folder), cwd="/w") as session:
        fill(session, 40, "one")
        session.append_message({"role": "user", "content": "last", "timestamp": 1})
        path, session_id = session.path, session.session_id
    push(str(tmp_path / "src"), pg_url)
    result = rotate_database(session_url(pg_url, session_id))
    assert result.rotated and result.successor_id is not None
    pulled_files = pull(pg_url, tmp_path / "out").files
    assert sorted((Path(f["file"]).parent.name, f["archive"]) for f in pulled_files) == [
        ("archive", True), ("team", False)]  # an archive in a subfolder is one too
    pulled = sorted(str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("*")
                    if p.is_file())
    old_name = Path(path).name
    assert f"team/archive/{old_name}" in pulled and len(pulled) == 2
    live = next(tmp_path / "out" / p for p in pulled if "archive" not in p)
    chain = lineage(str(live))
    assert [Path(p).name for p in chain] == [old_name, live.name]
    assert (tmp_path / "out" / "team" / "archive" / old_name).read_bytes().startswith(
        Path(path).read_bytes())  # the old file, then its seal
    with Session.open(str(live)) as session:  # a file session again, continuing the lineage
        assert session.live_context().messages[-1]["content"] == "last"


def one_session(folder: Path, text: str) -> Path:
    """A folder holding `session.jsonl`, a session of one message."""
    folder.mkdir(parents=True)
    with Session.create(str(folder), cwd="/w") as session:
        session.append_message({"role": "user", "content": text, "timestamp": 1})
        path = Path(session.path)
    return path.rename(folder / "session.jsonl")


def test_sessions_of_one_file_name_are_all_pulled_each_under_a_name_of_its_own(
        pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two folders' `session.jsonl` (two sessions) pushed one after the other: a pull of the
    database writes the first under that name and the second in a folder named by its id,
    with a warning; nothing is written twice."""
    first = one_session(tmp_path / "a", "from a")
    second = one_session(tmp_path / "b", "from b")
    push(str(tmp_path / "a"), pg_url)
    push(str(tmp_path / "b"), pg_url)
    second_id = load(str(second)).header["id"]  # type: ignore[index]
    assert main(["pull", pg_url, str(tmp_path / "out")]) == 0
    assert (f"written as {tmp_path / 'out' / second_id / 'session.jsonl'}, not as "
            f"{tmp_path / 'out' / 'session.jsonl'}: a file name of its lineage is an earlier "
            "session's") in capsys.readouterr().err
    assert files_under(tmp_path / "out") == {
        "session.jsonl": first.read_bytes(),
        f"{second_id}/session.jsonl": second.read_bytes()}
    result = pull(pg_url, tmp_path / "again")
    renamed = [f for f in result.files if "renamed_from" in f]
    assert [f["renamed_from"] for f in renamed] == [str(tmp_path / "again" / "session.jsonl")]


def rotated_as(folder: Path, name: str, tag: str) -> tuple[str, dict[str, bytes]]:
    """A session first written as `folder/name`, rotated once (its archive is
    `archive/<name>.gz`): the live file, and the folder's files."""
    folder.mkdir(parents=True)
    with Session.create(str(folder), cwd="/w") as session:
        fill(session, 40, tag)
        made = Path(session.path)
    made.rename(folder / name)
    with Session.open(str(folder / name)) as session:
        assert session.rotate().rotated
        session.append_message({"role": "user", "content": f"live {tag}", "timestamp": 1})
        live = session.path
    return live, files_under(folder)


def test_a_lineage_whose_names_are_taken_is_pulled_whole_into_a_folder_of_its_own(
        pg_url: str, tmp_path: Path) -> None:
    """Two folders' lineages whose archives have one name (`archive/main.jsonl.gz`): the
    second lineage goes whole into a folder named by its live session's id, where its live
    file's `parentSession` still finds its archive (renaming the archive alone cut it)."""
    from journal import lineage

    _, first = rotated_as(tmp_path / "a", "main.jsonl", "one")
    live_b, second = rotated_as(tmp_path / "b", "main.jsonl", "two")
    assert "archive/main.jsonl.gz" in first and "archive/main.jsonl.gz" in second
    push(str(tmp_path / "a"), pg_url)
    push(str(tmp_path / "b"), pg_url)
    pull(pg_url, tmp_path / "out")
    live_id = load(live_b).header["id"]  # type: ignore[index]
    assert files_under(tmp_path / "out") == {
        **first, **{f"{live_id}/{name}": data for name, data in second.items()}}
    chain = lineage(str(tmp_path / "out" / live_id / Path(live_b).name))
    assert [str(Path(p).relative_to(tmp_path / "out")) for p in chain] == [
        f"{live_id}/archive/main.jsonl.gz", f"{live_id}/{Path(live_b).name}"]


def test_a_file_appearing_while_a_pull_writes_is_never_replaced(
        pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another program makes the file a pull is about to publish: the pull leaves it as it
    is, removes what it wrote and the folders it made, and says so."""
    from journal.publish import NewFile

    rotated_lineage(tmp_path / "src")
    push(str(tmp_path / "src"), pg_url)
    out = tmp_path / "out"
    real = NewFile.sync
    synced: list[str] = []

    def sync(self: NewFile) -> None:
        real(self)
        synced.append(self.final)
        if len(synced) == 2:  # the second file: someone else's appears at its name
            Path(self.final).write_text("theirs")

    monkeypatch.setattr(NewFile, "sync", sync)
    with pytest.raises(TransferError, match="appeared meanwhile; nothing was written"):
        pull(pg_url, out)
    assert Path(synced[1]).read_text() == "theirs"
    assert [str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()] == [
        str(Path(synced[1]).relative_to(out))]  # the first file written is gone again


def test_a_pull_that_fails_midway_leaves_no_folder_it_made(
        pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from journal.publish import NewFile

    rotated_lineage(tmp_path / "src")
    push(str(tmp_path / "src"), pg_url)
    real = NewFile.sync
    calls: list[int] = []

    def sync(self: NewFile) -> None:
        calls.append(1)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(self)

    monkeypatch.setattr(NewFile, "sync", sync)
    with pytest.raises(OSError, match="No space left"):
        pull(pg_url, tmp_path / "out" / "deep")
    assert len(calls) == 3 and not (tmp_path / "out").exists()


def test_archives_kept_outside_the_session_folder_are_pulled_into_it(
        pg_url: str, tmp_path: Path) -> None:
    """A lineage rotated with its archives in another folder (`--archive-dir`): pushed, its
    archives are named `archive/<name>`, so a pull writes them inside the folder, where the
    live file's lineage finds them."""
    from journal import lineage

    folder = tmp_path / "src"
    folder.mkdir()
    with Session.create(str(folder), cwd="/w") as session:
        fill(session, 40, "one")
        assert session.rotate(archive_dir=str(tmp_path / "elsewhere")).rotated
        session.append_message({"role": "user", "content": "live", "timestamp": 1})
        live = session.path
    [archive] = list((tmp_path / "elsewhere").iterdir())
    pushed = push(live, pg_url)
    assert [r["name"] for r in pushed.pushed] == [f"archive/{archive.name}", Path(live).name]
    pull(pg_url, tmp_path / "out")
    assert files_under(tmp_path / "out") == {f"archive/{archive.name}": archive.read_bytes(),
                                            Path(live).name: Path(live).read_bytes()}
    assert [Path(p).name for p in lineage(str(tmp_path / "out" / Path(live).name))] == [
        archive.name, Path(live).name]


def test_a_session_skipped_by_a_push_keeps_its_file_name(pg_url: str, tmp_path: Path) -> None:
    """Pushed from `src/` as `team/<name>`, then again from `src/team/` (the same bytes:
    skipped): the name it was stored under stays, and the pull writes it there."""
    path = one_session(tmp_path / "src" / "team", "x")
    push(str(tmp_path / "src"), pg_url)
    again = push(str(tmp_path / "src" / "team"), pg_url)
    assert again.pushed == [] and len(again.skipped) == 1
    pull(pg_url, tmp_path / "out")
    assert files_under(tmp_path / "out") == {"team/session.jsonl": path.read_bytes()}


def test_a_line_the_database_cannot_hold_is_refused_naming_the_file(
        pg_url: str, tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(pi_path("all-types.jsonl").read_bytes()
                     + b'{"type":"custom","id":"zz","customType":"\xff"}\n')
    before = path.read_bytes()
    with pytest.raises(TransferError, match=rf"^{path}: cannot be stored \(not valid UTF-8"
                       r".*the file is as it was; nothing of its lineage was pushed"):
        push(str(path), pg_url)
    assert count_streams(pg_url) == 0 and path.read_bytes() == before


def test_results_and_errors_name_the_database_without_its_password(
        pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The server trusts local connections, so a URL with a password works here: the
    password is in no result or message of push, ls and pull."""
    secret = "s3cret-pw"
    url = pg_url.replace("://postgres@", f"://postgres:{secret}@")
    assert secret in url
    one_session(tmp_path / "src", "x")
    assert main(["push", str(tmp_path / "src"), url, "--json"]) == 0
    assert main(["ls", url, "--json"]) == 0
    assert main(["pull", url, str(tmp_path / "out"), "--json"]) == 0
    assert main(["pull", session_url(url, "nope"), str(tmp_path / "none")]) == 2
    out, err = capsys.readouterr()
    assert "postgres:***@" in out and "no such session" in err
    assert secret not in out and secret not in err


def pushed_with_compaction(tmp_path: Path, pg_url: str) -> tuple[str, str]:
    """(the file's path, its session id): a session with a compaction (so it can rotate),
    pushed from `src/`."""
    folder = tmp_path / "src"
    folder.mkdir()
    with Session.create(str(folder), cwd="/w") as session:
        fill(session, 40, "one")
        session.append_message({"role": "user", "content": "last", "timestamp": 1})
        path, session_id = session.path, session.session_id
    push(str(folder), pg_url)
    return path, session_id


def test_a_rotation_while_a_pull_reads_makes_it_pull_again(
        pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The session is rotated after the pull listed it and before it read it: what it read
    holds the seal and would be written as the live file, its successor left out. The pull
    notices, undoes, and pulls again: the sealed session as the archive, and the successor."""
    from journal import lineage
    from journal.pg.rotation import rotate_database
    from journal.pg.storage import PostgresStorage

    path, session_id = pushed_with_compaction(tmp_path, pg_url)
    real = PostgresStorage.open_reader
    rotated: list[str] = []

    def open_reader(self: PostgresStorage) -> Any:
        if not rotated:
            rotated.append("")  # the rotation reads the session too
            result = rotate_database(session_url(pg_url, session_id))
            assert result.successor_id is not None
            rotated[0] = result.successor_id
        return real(self)

    monkeypatch.setattr(PostgresStorage, "open_reader", open_reader)
    pulled = pull(session_url(pg_url, session_id), tmp_path / "out")
    monkeypatch.undo()
    assert len(rotated) == 1
    assert sorted(f["session"].rsplit("=", 1)[1] for f in pulled.files) == sorted(
        [session_id, rotated[0]])
    live = next(Path(f["file"]) for f in pulled.files if not f["archive"])
    chain = lineage(str(live))
    assert len(chain) == 2 and Path(chain[0]).parent.name == "archive"
    assert Path(chain[0]).read_bytes().startswith(Path(path).read_bytes())


def test_a_pull_outrun_by_changes_every_time_writes_nothing(
        pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from journal.pg.storage import PostgresStorage
    from journal.pg.transfer import PULL_TRIES

    _, session_id = pushed_with_compaction(tmp_path, pg_url)
    real = PostgresStorage.open_reader
    renamed: list[int] = []

    def open_reader(self: PostgresStorage) -> Any:
        renamed.append(1)
        with connect(pg_url) as conn:  # as a rotation renames it
            conn.execute("UPDATE journal.streams SET file_name = %s WHERE session = %s",
                         (f"moved-{len(renamed)}.jsonl", session_id))
        return real(self)

    monkeypatch.setattr(PostgresStorage, "open_reader", open_reader)
    with pytest.raises(TransferError, match=f"rotated each of the {PULL_TRIES} times"):
        pull(pg_url, tmp_path / "out")
    assert len(renamed) == PULL_TRIES and not (tmp_path / "out").exists()


def test_ls_keeps_a_lineage_whose_live_session_was_deleted(
        pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The live session of a pushed lineage is deleted (as docs/postgres.md says to delete
    one): `ls` lists what is left, ending at the newest sealed session, as search, usage and
    pull still see it."""
    live = rotated_lineage(tmp_path / "src")
    push(live, pg_url)
    live_id = load(live).header["id"]  # type: ignore[index]
    with connect(pg_url) as conn:
        conn.execute("DELETE FROM journal.streams WHERE session = %s", (live_id,))
    assert main(["ls", pg_url, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 1 and rows[0]["sessions"] == 2 and rows[0]["session"] != live_id


def test_a_folder_is_pushed_one_file_in_memory_at_a_time(pg_url: str, tmp_path: Path) -> None:
    """Twelve sessions of about 1 MB: the push's peak memory (traced allocations) stays far
    below what holding them all at once takes."""
    import tracemalloc

    folder = tmp_path / "many"
    folder.mkdir()
    header = b'{"type":"session","version":3,"id":"%s","timestamp":"t","cwd":"/"}\n'
    line = b'{"type":"custom","id":"%08x","parentId":null,"timestamp":"t","customType":"' \
           + b"x" * 1000 + b'"}\n'
    total = 0
    for n in range(12):
        data = header % f"s{n}".encode() + b"".join(line % i for i in range(1000))
        (folder / f"s{n}.jsonl").write_bytes(data)
        total += len(data)
    tracemalloc.start()
    try:
        pushed = push(str(folder), pg_url)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(pushed.pushed) == 12
    assert peak < total * 0.6, (peak, total)  # held all at once: above the total


def test_ls_of_a_database_sorts_and_counts_entries_as_for_a_folder(
        pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--sort` and `--reverse` order a database's rows as a folder's (they were ignored),
    and `entries` counts entries, not the header line (as `info` and `ls DIR` count)."""
    from journal import inspect

    sizes = {}
    for name, turns in (("small", 1), ("big", 30), ("middle", 8)):
        url = session_url(pg_url, name)
        with Session.create(url, cwd="/w") as session:
            for i in range(turns):
                session.append_message({"role": "user", "content": f"{i}", "timestamp": 1})
        sizes[name] = inspect(url).entries
    assert main(["ls", pg_url, "--json", "--sort", "size"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["session"] for r in rows] == ["big", "middle", "small"]
    assert {r["session"]: r["entries"] for r in rows} == sizes
    assert main(["ls", pg_url, "--json", "--sort", "size", "--reverse"]) == 0
    assert [r["session"] for r in json.loads(capsys.readouterr().out)] == [
        "small", "middle", "big"]


def test_push_to_a_session_url_is_refused(pg_url: str, tmp_path: Path) -> None:
    one_session(tmp_path / "src", "x")
    with pytest.raises(TransferError, match="push takes a database URL"):
        push(str(tmp_path / "src"), session_url(pg_url, "mine"))
    assert count_streams(pg_url) == 0


def test_a_sealed_session_pushed_back_beside_the_one_it_came_from_is_pulled_too(
        pg_url: str, tmp_path: Path) -> None:
    """A session made under a URL's own id that a file name cannot hold (so its header has
    an id of its own) is rotated, pulled and pushed back: the copy (named by its header's
    id) and the original share a file name and a successor, so they are one lineage with two
    files of one name. A pull of the database writes them all, the copy in a folder named by
    its id (it was refused whole)."""
    url = session_url(pg_url, "my name")
    with Session.create(url, cwd="/w") as session:
        fill(session, 40, "one")
        assert session.rotate().rotated
        session.append_message({"role": "user", "content": "live", "timestamp": 1})
    pull(url, tmp_path / "first")
    push(str(tmp_path / "first"), pg_url)
    result = pull(pg_url, tmp_path / "whole")
    assert len(result.files) == 3
    moved = [f for f in result.files if "renamed_from" in f]
    copy = moved[0]["session"].rsplit("=", 1)[1] if len(moved) == 1 else None
    assert Path(moved[0]["file"]).relative_to(tmp_path / "whole").parts[0] == copy
    assert sorted(files_under(tmp_path / "whole").values()) == sorted(
        [*files_under(tmp_path / "first").values(),
         Path(moved[0]["file"]).read_bytes()])


def everything_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_a_pull_ended_by_sigterm_is_undone_and_exits_143(pg_url: str, tmp_path: Path) -> None:
    """A real `journal pull` process, stopped by SIGTERM with its first file published and
    the second in its temp: it removes both and the folders it made, and exits 143."""
    import signal

    from paused_cli import start

    rotated_lineage(tmp_path / "src")
    push(str(tmp_path / "src"), pg_url)
    out = tmp_path / "out"
    child, temp = start(["pull", pg_url, str(out)], pause_at=2)
    try:
        assert os.path.exists(temp) and len(files_under(out)) == 1
        child.send_signal(signal.SIGTERM)
        assert child.wait(20) == 128 + signal.SIGTERM
        err = child.stderr.read() if child.stderr else ""
    finally:
        child.kill()
        child.wait()
    assert "Traceback" not in err
    assert not out.exists()


def test_a_pull_ended_by_sigterm_just_after_it_published_a_file_removes_it_too(
        pg_url: str, tmp_path: Path) -> None:
    """The SIGTERM lands in the instant after the file is published, before the pull has
    noted it: the undo still finds it."""
    import signal

    from paused_cli import start

    rotated_lineage(tmp_path / "src")
    push(str(tmp_path / "src"), pg_url)
    out = tmp_path / "out"
    child, _ = start(["pull", pg_url, str(out)], pause_at=1, published=True)
    try:
        assert len(files_under(out)) == 1
        child.send_signal(signal.SIGTERM)
        assert child.wait(20) == 128 + signal.SIGTERM
    finally:
        child.kill()
        child.wait()
    assert not out.exists()


def no_temps(folder: Path) -> bool:
    return not [p for p in folder.rglob("*") if p.name.endswith(".tmp")]


def test_a_pull_killed_outright_is_finished_by_running_it_again(
        pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """SIGKILL leaves the files already published and the temp of the one being written. The
    next pull takes the files holding exactly its bytes as written (`already`), removes the
    temp (nobody holds it) and writes the rest: the lineage as a clean pull gives it."""

    from paused_cli import start

    rotated_lineage(tmp_path / "src")
    push(str(tmp_path / "src"), pg_url)
    out = tmp_path / "out"
    child, temp = start(["pull", pg_url, str(out)], pause_at=2)
    child.kill()
    child.wait()
    assert os.path.exists(temp) and len(files_under(out)) == 1
    first = next(iter(files_under(out)))
    assert main(["pull", pg_url, str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [(Path(f["file"]).relative_to(out).as_posix(), f["already"])
            for f in report["files"] if f["already"]] == [(first, True)]
    assert len(report["files"]) == 3
    assert files_under(out) == files_under(tmp_path / "src")
    assert no_temps(out)
    assert main(["pull", pg_url, str(out)]) == 0  # and again: all of it there
    assert capsys.readouterr().out.splitlines()[-1] == "0 file(s) written, 3 already there"


def test_a_file_there_with_other_bytes_is_still_refused_and_nothing_written(
        pg_url: str, tmp_path: Path) -> None:
    """Only the very bytes the pull would write count as written: an archive changed by one
    byte, one compressed otherwise (the same session inside), a link to the right bytes, are
    each refused before anything is written."""
    live = rotated_lineage(tmp_path / "src")
    push(str(tmp_path / "src"), pg_url)
    out = tmp_path / "out"
    pull(pg_url, out)
    names = sorted(files_under(out))
    gz = next(out / n for n in names if n.endswith(".gz"))
    plain = next(out / n for n in names if n.startswith("archive") and n.endswith(".jsonl"))
    (out / Path(live).name).unlink()
    right_gz, right_plain = gz.read_bytes(), plain.read_bytes()
    changed = [
        (plain, right_plain[:-2] + b"X\n"),
        (gz, gzip.compress(gzip.decompress(right_gz), compresslevel=9, mtime=0)),
    ]
    for path, data in changed:
        path.write_bytes(data)
        with pytest.raises(TransferError, match="already exists and is not what the pull"):
            pull(pg_url, out)
        assert not (out / Path(live).name).exists()
        path.write_bytes(right_gz if path == gz else right_plain)
    (tmp_path / "elsewhere").write_bytes(right_plain)
    plain.unlink()
    plain.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(TransferError, match="already exists and is not what the pull"):
        pull(pg_url, out)
    assert not (out / Path(live).name).exists() and plain.is_symlink()


def test_a_second_pull_into_a_folder_a_pull_is_writing_into_is_refused(
        pg_url: str, tmp_path: Path) -> None:
    """Two pulls into one folder: the second is refused and touches nothing (the temp the
    first is writing stays); the first, ended by SIGTERM, removes what it wrote, and a pull
    then writes everything. The second once took the first one's files as already there and
    reported them written, and the first one's undo then removed them."""
    import signal

    from paused_cli import start

    rotated_lineage(tmp_path / "src")
    push(str(tmp_path / "src"), pg_url)
    out = tmp_path / "out"
    child, temp = start(["pull", pg_url, str(out)], pause_at=1)
    try:
        before = files_under(out)
        with pytest.raises(TransferError, match="another pull is writing into it"):
            pull(pg_url, out)
        assert os.path.exists(temp)  # the first pull's, still being written
        assert files_under(out) == before
        child.send_signal(signal.SIGTERM)
        assert child.wait(20) == 128 + signal.SIGTERM
    finally:
        child.kill()
        child.wait()
    assert not os.path.exists(temp) and files_under(out) == {}
    result = pull(pg_url, out)
    assert not any(f["already"] for f in result.files)
    assert files_under(out) == files_under(tmp_path / "src") and no_temps(out)


def test_a_session_made_under_a_name_is_that_session_after_a_pull_and_a_push(
        pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`journal new pg:NAME`: the session's key is NAME. Its header once had an id of its
    own, which `--json` printed as `id` (and `pg:<that id>` named no session), and a pull
    then a push stored it again as a second session under that id, beside the first. The
    header's id is NAME now, when a file name can hold it; one that cannot (a `/` in it)
    still gets an id of its own, as before."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("JOURNAL_DATABASE_URL", pg_url)
    assert main(["new", "pg:my-session_1.x", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["id"] == "my-session_1.x"
    with Session.open(session_url(pg_url, "my-session_1.x")) as session:
        session.append_message({"role": "user", "content": "hello", "timestamp": 1})
    odd = session_url(pg_url, "team/a b")
    with Session.create(odd, cwd="/w") as session:
        odd_id = str(session.header["id"])  # type: ignore[index]
    assert odd_id != "team/a b"
    pull(pg_url, tmp_path / "out")
    assert any(f.name.endswith("_my-session_1.x.jsonl") for f in (tmp_path / "out").iterdir())
    again = push(str(tmp_path / "out"), pg_url)
    actions = {row["session"].rpartition("session=")[2]: row["action"]
               for row in again.sessions}
    assert actions == {"my-session_1.x": "unchanged", odd_id: "new"}, again.sessions
    with connect(pg_url) as conn:
        stored = sorted(r[0] for r in conn.execute("SELECT session FROM journal.streams"))
    assert stored == sorted(["my-session_1.x", "team/a b", odd_id])
