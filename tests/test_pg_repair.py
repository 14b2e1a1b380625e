"""Repair of a database session: the file repair's plan, published as a new generation under
the lease; every removed or rewritten line kept in the journal.quarantine table."""

from __future__ import annotations

import base64
import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg", reason="the PostgreSQL extra is not installed")
from corruption import (  # noqa: E402
    edit_entry,
    generated_bytes,
    glue_torn,
    insert_lines,
    split_lines,
)
from third_party import pi_path  # noqa: E402

from journal import (  # noqa: E402
    Durability,
    LockTimeout,
    Session,
    codec,
    load,
    model,
    repair,
)
from journal.cli import main  # noqa: E402
from journal.context import build_context  # noqa: E402
from journal.errors import JournalError, LeaseLost  # noqa: E402
from journal.pg.connect import connect  # noqa: E402
from journal.pg.repair import quarantined, quarantined_record, repair_database  # noqa: E402
from journal.pg.url import session_url  # noqa: E402
from journal.quarantine import numbered_records  # noqa: E402
from journal.storage import as_storage  # noqa: E402
from journal.tree import Tree  # noqa: E402


def damaged(tmp_path: Path) -> bytes:
    """A generated session with a duplicated line, a broken parent and a torn, glued line."""
    data = generated_bytes(tmp_path, seed=7, size=120_000)
    lines = split_lines(data)
    data = insert_lines(data, 12, lines[11])  # the same entry twice: a duplicate id

    def orphan(entry: dict[str, Any]) -> None:
        entry["parentId"] = "ffffffff"

    data = edit_entry(data, 25, orphan)  # a parent that is nowhere
    return glue_torn(data, 40, 30)  # a line cut short and the next one written after it


def context(snap: Any) -> Any:
    tree = Tree(snap.entries)
    return build_context(tree, tree.leaf_id).messages


def stored(pg_url: str, data: bytes) -> str:
    url = session_url(pg_url, str(uuid.uuid4()))
    as_storage(url).create(data)
    return url


def db_bytes(url: str) -> bytes:
    with as_storage(url).open_reader() as reader:
        return reader.stream.read()


def test_database_repair_gives_the_file_repairs_bytes_and_keeps_what_it_removed(
        pg_url: str, tmp_path: Path) -> None:
    data = damaged(tmp_path)
    path = tmp_path / "s.jsonl"
    path.write_bytes(data)
    file_report = repair(str(path))
    url = stored(pg_url, data)
    report = repair_database(url)
    assert report.changed and file_report.changed
    assert report.counts == file_report.counts
    assert len(report.counts) >= 2
    # what the file repair wrote, byte for byte: the duplicate's new id is derived from the
    # session's bytes, the same in both (docs/format.md § 5)
    assert report.problems == file_report.problems
    assert db_bytes(url) == path.read_bytes()
    fixed, ours = load(str(path)), load(url)
    assert ours.diagnostics == [] and context(ours) == context(fixed)
    kept = [r["data"] for _, r in numbered_records(str(path) + ".quarantine")]
    assert [quarantined_record(url, n)["data"] for n in range(1, len(kept) + 1)] == kept
    assert len(quarantined(url)) == len(kept) > 0
    again = repair_database(url)
    assert not again.changed  # repaired once and for all
    assert len(quarantined(url)) == len(kept)


def test_dry_run_and_a_clean_session_change_nothing(pg_url: str, tmp_path: Path) -> None:
    data = damaged(tmp_path)
    url = stored(pg_url, data)
    report = repair_database(url, dry_run=True)
    assert report.changed and report.dry_run
    assert db_bytes(url) == data and quarantined(url) == []
    clean = stored(pg_url, generated_bytes(tmp_path, seed=7, size=120_000))
    assert not repair_database(clean).changed
    assert quarantined(clean) == []


def test_repair_waits_for_the_writer(pg_url: str, tmp_path: Path) -> None:
    url = session_url(pg_url, "busy")
    with Session.create(url, cwd="/w") as session:
        session.append_message({"role": "user", "content": "hi", "timestamp": 1})
        with pytest.raises(LockTimeout):
            repair_database(url, lock_timeout=0.2)


def killing_the_lease_connection(url: str, then: Any = None
                                 ) -> tuple[Any, list[tuple[int, int]]]:
    """A progress callback that, at its first call (while repair checks the session, given a
    small `journal.progress.STEP`), ends the backend holding the session's lease, as a
    network drop would, and then calls `then`; and the (done, total) it did that at."""
    done: list[tuple[int, int]] = []

    def progress(so_far: int, total: int) -> None:
        if done:
            return
        done.append((so_far, total))
        storage = as_storage(url)
        with psycopg.connect(storage.conninfo, autocommit=True) as admin:
            row = admin.execute(
                "SELECT pg_terminate_backend(holder_backend) FROM journal.streams "
                "WHERE session = %s", (storage.session,)).fetchone()
        assert row == (True,)
        if then is not None:
            then()

    return progress, done


def in_time(work: Any, seconds: float = 60) -> Any:
    """`work()`'s result (or its exception), failing the test if it has not ended in time."""
    import threading

    out: list[Any] = []

    def run() -> None:
        try:
            out.append(("value", work()))
        except BaseException as e:  # handed to the test
            out.append(("raised", e))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert out, f"still running after {seconds} s"
    kind, value = out[0]
    if kind == "raised":
        raise value
    return value


def test_repair_takes_its_lease_back_when_its_connection_dies(
        pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lease's connection ends while repair checks the session, and nobody takes the
    session meanwhile: the replacement and its quarantine go through over a new connection,
    under the lease taken back. (Before, the quarantine's insert failed on the lost connection,
    and the repair with it; where the client knew the connection lost, the lease was taken
    back on a second connection, which waited for ever for the row lock the replacement
    held.)"""
    monkeypatch.setattr("journal.progress.STEP", 4096)
    data = damaged(tmp_path)
    url = stored(pg_url, data)
    killed, at = killing_the_lease_connection(url)
    report = in_time(lambda: repair_database(url, progress=killed))
    assert len(at) == 1 and at[0][0] < at[0][1] / 2  # while the session was checked
    assert report.changed
    assert load(url).diagnostics == []
    assert len(quarantined(url)) > 0
    path = tmp_path / "s.jsonl"
    path.write_bytes(data)
    repair(str(path))
    assert len(quarantined(url)) == len(list(numbered_records(str(path) + ".quarantine")))


def test_repair_stops_when_another_writer_took_the_session(
        pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lease's connection ends while repair checks the session and another writer takes
    the session: the repair fails, and neither the quarantine nor the session is changed."""
    monkeypatch.setattr("journal.progress.STEP", 4096)
    data = damaged(tmp_path)
    url = stored(pg_url, data)
    taken: list[Any] = []
    killed, at = killing_the_lease_connection(
        url, lambda: taken.append(as_storage(url).lock(10)))
    try:
        with pytest.raises(LeaseLost):
            in_time(lambda: repair_database(url, progress=killed))
        assert len(at) == 1 and at[0][0] < at[0][1] / 2  # while the session was checked
        assert taken, "the other writer never took the session"
        assert db_bytes(url) == data and quarantined(url) == []
    finally:
        for lease in taken:
            lease.release()

def test_repair_and_quarantine_commands(pg_url: str, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    url = stored(pg_url, damaged(tmp_path))
    assert main(["repair", url, "--check"]) == 1
    capsys.readouterr()
    assert main(["repair", url, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["changed"] and report["quarantine"] == url
    assert main(["quarantine", "list", url, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and all("data" not in row for row in rows)
    assert main(["quarantine", "show", url, "1"]) == 0
    assert capsys.readouterr().out.encode() == quarantined_record(url, 1)["data"]
    assert main(["quarantine", "show", url, "1", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)  # as a file's record: base64 and text
    assert base64.b64decode(shown["bytes"]) == quarantined_record(url, 1)["data"]
    assert shown["text"] == quarantined_record(url, 1)["data"].decode()
    assert main(["repair", url, "--check"]) == 0
    capsys.readouterr()
    restored = tmp_path / "restored.bin"
    assert main(["quarantine", "restore", url, "1", str(restored)]) == 0
    assert restored.read_bytes() == quarantined_record(url, 1)["data"]
    assert main(["quarantine", "restore", url, "1", str(restored)]) == 2  # never overwritten


def test_the_quarantine_of_a_missing_session_is_an_error_but_a_deleted_ones_records_list(
        pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`quarantine list` of a session the database has never held says so (exit 2), as every
    other command does; the records of a session deleted since are still listed."""
    connect(pg_url).close()  # the schema is there: the session is not
    assert main(["quarantine", "list", session_url(pg_url, "never-was")]) == 2
    assert "no such session" in capsys.readouterr().err
    lease = as_storage(session_url(pg_url, "leased-only")).lock(5)  # a row, no session yet
    try:
        assert main(["quarantine", "list", session_url(pg_url, "leased-only")]) == 2
    finally:
        lease.release()
    assert "no such session" in capsys.readouterr().err
    url = stored(pg_url, damaged(tmp_path))
    capsys.readouterr()
    repair_database(url)
    kept = quarantined(url)
    assert kept
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DELETE FROM journal.streams WHERE session = %s", (url.rsplit("=", 1)[1],))
    assert main(["quarantine", "list", url, "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == len(kept)
    assert main(["quarantine", "show", url, "1"]) == 0  # and shown, the last one and no more
    assert capsys.readouterr().out.encode() == quarantined_record(url, 1)["data"]
    assert main(["quarantine", "show", url, str(len(kept) + 1)]) == 2
    assert f"no quarantine record {len(kept) + 1}" in capsys.readouterr().err


def test_show_and_restore_of_a_missing_session_say_so_as_list_does(
        pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`quarantine show` and `restore` of a session the database has never held say there is
    no such session (exit 2, nothing written), as `list` does, not that it has no record N;
    a session with no records lists none (exit 0) and has no record 1 (exit 2)."""
    connect(pg_url).close()
    missing = session_url(pg_url, "never-was")
    out = tmp_path / "out"
    for argv in (["show", missing, "1"], ["show", missing, "1", "--json"],
                 ["restore", missing, "1", str(out)]):
        assert main(["quarantine", *argv]) == 2
        err = capsys.readouterr().err
        assert "no such session in the database" in err and "record" not in err, argv
    assert not out.exists()
    clean = stored(pg_url, generated_bytes(tmp_path, seed=3, size=2_000))
    assert main(["quarantine", "list", clean, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert main(["quarantine", "show", clean, "1"]) == 2
    assert "no quarantine record 1" in capsys.readouterr().err


def test_the_json_of_a_database_record_has_every_key_of_a_files(
        pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`quarantine list --json` and `show --json` give the same keys for a database session
    as for a file (`line`, `key`, ...), and `generation` besides (a file has none)."""
    data = damaged(tmp_path)
    path = tmp_path / "s.jsonl"
    path.write_bytes(data)
    assert main(["repair", str(path)]) == 0
    url = stored(pg_url, data)
    assert main(["repair", url]) == 0
    capsys.readouterr()

    def printed(*argv: str) -> Any:
        assert main(["quarantine", *argv, "--json"]) == 0
        return json.loads(capsys.readouterr().out)

    file_rows, rows = printed("list", str(path)), printed("list", url)
    assert len(rows) == len(file_rows) > 1
    for row, file_row in zip(rows, file_rows, strict=True):
        assert set(row) - set(file_row) == {"generation"} and set(file_row) <= set(row)
    keys = [row["key"] for row in rows]
    assert len(set(keys)) == len(keys) and all(len(k) == 32 and int(k, 16) >= 0 for k in keys)
    assert printed("list", url) == rows  # a record keeps its key
    for row in (*rows, *file_rows):  # when it was kept, in milliseconds (format.md § 9.2)
        assert re.fullmatch(r"20\d\d-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", row["time"]), row
    file_shown, shown = printed("show", str(path), "2"), printed("show", url, "2")
    assert file_shown["line"] == shown["line"] == 2
    assert set(shown) - set(file_shown) == {"generation"} and set(file_shown) <= set(shown)
    assert shown["key"] == rows[1]["key"]
    assert {k: v for k, v in file_shown.items() if k not in ("bytes", "text")} == file_rows[1]


def unleased_appends(url: str, times: int) -> tuple[list[bytes], Any, list[Any]]:
    """The lines an appender without the lease commits, from another thread, and a repair
    progress callback that has it commit one (a sound entry, on the branch) as each reading
    of the session is checked, for the first `times` readings; and the threads of the lines
    that still waited after 2 s (the repair went on meanwhile)."""
    import threading

    appended: list[bytes] = []
    totals: list[int] = []  # each reading's (twice the bytes read), the same all through it
    waited: list[threading.Thread] = []

    def commit(line: bytes) -> None:
        appender = as_storage(url).open_appender(Durability.always())
        try:
            appender.commit(line)
        finally:
            appender.close()

    def progress(so_far: int, total: int) -> None:
        if totals and total == totals[-1] or len(appended) == times:
            return
        totals.append(total)
        leaf = Tree(load(url).entries).leaf_id
        line = codec.encode(model.custom_entry(f"unleased{len(appended)}", leaf, "x"))
        thread = threading.Thread(target=commit, args=(line,), daemon=True)
        thread.start()
        thread.join(2)
        if thread.is_alive():
            waited.append(thread)
        appended.append(line)

    return appended, progress, waited


def test_a_line_appended_without_the_lease_while_repair_checks_makes_it_read_again(
        pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An appender without the lease (not fenced) commits a line while repair checks the
    session it read: the replacement would leave that acknowledged line out, so it is not
    published; repair reads the session again, line and all, and repairs that."""
    monkeypatch.setattr("journal.progress.STEP", 4096)
    data = damaged(tmp_path)
    url = stored(pg_url, data)
    appended, progress, waited = unleased_appends(url, 1)
    report = in_time(lambda: repair_database(url, progress=progress))
    assert len(appended) == 1 and waited == [] and report.changed
    assert db_bytes(url).endswith(appended[0])  # committed meanwhile, kept by the replacement
    assert all(r["offset"] < len(data) for r in quarantined(url))


def test_a_repair_outrun_by_an_appender_without_the_lease_holds_it_off_the_last_time(
        pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An appender without the lease commits while each of repair's readings is checked: the
    last reading holds the session's row until the replacement committed, so the line sent
    then waits for it and is appended after the repaired session; every line is kept."""
    from journal.pg.rotation import CHANGED_TRIES

    monkeypatch.setattr("journal.progress.STEP", 4096)
    data = damaged(tmp_path)
    url = stored(pg_url, data)
    appended, progress, waited = unleased_appends(url, CHANGED_TRIES)
    report = in_time(lambda: repair_database(url, progress=progress))
    assert len(appended) == CHANGED_TRIES and len(waited) == 1 and report.changed
    waited[0].join(10)
    assert not waited[0].is_alive()
    after = db_bytes(url)
    assert after.endswith(appended[-2] + appended[-1])  # the last one after the repair's
    assert all(after.count(line) == 1 for line in appended)
    assert not repair_database(url).changed  # repaired, every line there once


def pushed_v1(pg_url: str) -> str:
    """A pi session of format version 1 (a fixture) pushed as it is: its URL."""
    from journal.pg.transfer import push

    source = pi_path("before-compaction.jsonl")
    assert load(str(source)).version == 1
    push(str(source), pg_url)
    return session_url(pg_url, str(load(str(source)).header["id"]))  # type: ignore[index]


def test_repair_migrate_writes_a_version_1_database_session_as_version_3(
        pg_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`journal repair --migrate URL` (it said --migrate was for files): the session is
    version 3, gives the model the same context, and its original lines are in the
    quarantine."""
    url = pushed_v1(pg_url)
    before = context(load(url))
    assert main(["repair", url, "--migrate", "--check"]) == 1  # it would change it
    capsys.readouterr()
    assert main(["repair", url, "--migrate", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["changed"] and report["quarantine"] == url  # where the original went
    after = load(url)
    assert after.version == 3 and context(after) == before
    assert quarantined_record(url, len(quarantined(url)))["data"] == Path(
        pi_path("before-compaction.jsonl")).read_bytes()  # as it was: a file's .bak


def test_a_push_after_the_database_migrated_the_session_says_so(
        pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A version 1 file pushed, then opened for writing in the database (migrated there):
    pushing the file again is refused naming the migration and what to run, not only 'line
    1 differs'; the file migrated as the refusal says is then the database's bytes."""
    import shutil

    copy = tmp_path / "before-compaction.jsonl"
    shutil.copy(pi_path("before-compaction.jsonl"), copy)
    url = pushed_v1(pg_url)
    Session.open(url).close()  # migrated in the database
    capsys.readouterr()
    assert main(["push", str(copy), pg_url]) == 2
    err = capsys.readouterr().err
    assert "holds it as session format version 3 and the file as version 1" in err, err
    assert f"'journal repair --migrate {copy}'" in err
    assert main(["repair", "--migrate", str(copy)]) == 0
    capsys.readouterr()
    assert main(["push", str(copy), pg_url, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["sessions"]
    assert [row["action"] for row in rows] == ["unchanged"], rows


def test_rotating_a_version_1_database_session_says_to_migrate_it_first(
        pg_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """As for a file: the refusal names the command that makes it rotatable."""
    url = pushed_v1(pg_url)
    before = db_bytes(url)
    assert main(["rotate", url]) == 2
    err = capsys.readouterr().err
    assert "only version 3 sessions rotate" in err and "journal repair --migrate " in err
    assert db_bytes(url) == before


def test_opening_a_version_1_database_session_migrates_it_and_appends(
        pg_url: str, caplog: pytest.LogCaptureFixture) -> None:
    url = pushed_v1(pg_url)
    with pytest.raises(Exception, match="appending would mix formats"):
        Session.open(url, migrate=False)
    assert load(url).version == 1  # refused: nothing changed
    with caplog.at_level("WARNING"), Session.open(url) as session:
        session.append_message({"role": "user", "content": "after", "timestamp": 1})
    assert any("migrated to session format version 3" in r.getMessage()
               for r in caplog.records)
    snap = load(url)
    assert snap.version == 3 and snap.entries[-1]["message"]["content"] == "after"
    [record] = quarantined(url)
    assert record["reason"] == "migrated" and record["length"] == Path(
        pi_path("before-compaction.jsonl")).stat().st_size


@pytest.fixture
def every_try_the_last(monkeypatch: pytest.MonkeyPatch) -> None:
    """Repair and rotation make one try only, the one that holds the session's row."""
    from journal.pg.rotation import again_while_changed

    monkeypatch.setattr(again_while_changed, "__defaults__", (1,))


def test_the_last_try_outlives_a_server_idle_limit_shorter_than_its_read(
        pg_url: str, tmp_path: Path, every_try_the_last: None) -> None:
    """The last try's transaction sits idle on the lease's connection while the session is
    read on others: a server's `idle_in_transaction_session_timeout` shorter than the read
    would end it (and the lease's connection); it sets its own (review 46)."""
    import time

    data = damaged(tmp_path)
    url = stored(pg_url, data)
    with connect(pg_url) as conn:
        database = conn.info.dbname
        conn.execute(f'ALTER DATABASE "{database}" SET idle_in_transaction_session_timeout '
                     "= '500ms'")
    slow: list[int] = []

    def progress(so_far: int, total: int) -> None:
        if not slow:
            slow.append(1)
            time.sleep(1.5)

    report = in_time(lambda: repair_database(url, progress=progress))
    assert slow and report.changed and quarantined(url)


def test_a_last_try_whose_commit_is_refused_says_nothing_changed(
        pg_url: str, tmp_path: Path, every_try_the_last: None) -> None:
    """A failure at the last try's COMMIT on a connection that is still there (here a
    deferred constraint) committed nothing, and says so: not "may have been committed"."""
    data = damaged(tmp_path)
    url = stored(pg_url, data)
    with connect(pg_url) as conn:
        conn.execute("CREATE FUNCTION pg_temp_refuse() RETURNS trigger LANGUAGE plpgsql AS "
                     "$$ BEGIN RAISE EXCEPTION 'refused at commit'; END $$")
        conn.execute("CREATE CONSTRAINT TRIGGER refuse AFTER INSERT ON journal.quarantine "
                     "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION "
                     "pg_temp_refuse()")
    with pytest.raises(JournalError, match=r"not committed \(nothing changed\): refused at "
                                           "commit"):
        repair_database(url)
    assert db_bytes(url) == data and quarantined(url) == []


def test_a_last_try_that_cannot_lock_the_row_says_so(
        pg_url: str, tmp_path: Path, every_try_the_last: None,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The row held elsewhere (from once the lease is taken) past the server's lock_timeout:
    one error naming the session, nothing changed (not the driver's own exception)."""
    from journal.pg import repair as pg_repair

    data = damaged(tmp_path)
    url = stored(pg_url, data)
    with connect(pg_url) as conn:
        conn.execute(f'ALTER DATABASE "{conn.info.dbname}" SET lock_timeout = \'200ms\'')
    holder = connect(pg_url)
    real = pg_repair.lock_live

    def then_held(*args: Any, **kw: Any) -> Any:
        taken = real(*args, **kw)
        holder.execute("BEGIN")
        holder.execute("SELECT 1 FROM journal.streams WHERE session = %s FOR UPDATE",
                       (url.rsplit("=", 1)[1],))
        return taken

    monkeypatch.setattr(pg_repair, "lock_live", then_held)
    try:
        with pytest.raises(JournalError, match="could not lock the session's row "
                                               r"\(nothing changed\)"):
            repair_database(url)
    finally:
        holder.close()
    assert db_bytes(url) == data and quarantined(url) == []


def test_a_connection_lost_inside_the_last_try_says_nothing_was_committed(
        pg_url: str, tmp_path: Path, every_try_the_last: None,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The lease's backend ends while the last try's replacement is written (its quarantine
    kept, the swap not yet made): the replacement's transaction is a savepoint of the try's,
    which the server rolled back, so it says the session is as it was rather than that the
    replacement may have been committed."""
    from journal.pg import repair as pg_repair

    data = damaged(tmp_path)
    url = stored(pg_url, data)
    real = pg_repair._keep

    def then_cut_off(storage: Any, lease: Any, *args: Any, **kw: Any) -> None:
        real(storage, lease, *args, **kw)
        with connect(pg_url) as other:
            other.execute("SELECT pg_terminate_backend(%s)", (lease.conn.info.backend_pid,))

    monkeypatch.setattr(pg_repair, "_keep", then_cut_off)
    with pytest.raises(JournalError, match=r"lost before the replacement was committed \(the "
                                           "session is as it was\\)"):
        repair_database(url)
    monkeypatch.undo()
    assert db_bytes(url) == data and quarantined(url) == []
