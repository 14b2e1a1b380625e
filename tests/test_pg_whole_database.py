"""`journal repair` and `journal rotate` of a whole database (`pg:`, a URL without
`session`): every live session in it, one per lineage, as `repair DIR` and `rotate DIR` go
through a folder's sessions; the same output, exit codes and `--json`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

psycopg = pytest.importorskip("psycopg", reason="the PostgreSQL extra is not installed")
from corruption import edit_entry, generated_bytes, glue_torn, insert_lines, split_lines  # noqa: E402

from journal import Session  # noqa: E402
from journal.cli import main  # noqa: E402
from journal.pg.connect import connect  # noqa: E402
from journal.pg.repair import quarantined  # noqa: E402
from journal.pg.rotation import rotate_database, stream_row  # noqa: E402
from journal.pg.storage import PostgresStorage  # noqa: E402
from journal.pg.url import BadDatabaseUrl, session_url  # noqa: E402
from journal.storage import as_storage  # noqa: E402

HERE = Path(__file__).resolve().parent
WORKER = str(HERE / "pg_worker.py")
ENV = {**os.environ, "PYTHONPATH": f"{HERE.parent}{os.pathsep}{HERE}"}


def damaged(tmp_path: Path) -> bytes:
    """A generated session with no compaction (nothing to rotate), damaged as
    tests/test_pg_repair.py damages one: a duplicate id, a broken parent, a torn line."""
    data = generated_bytes(tmp_path, seed=7, size=120_000, compactions=False)
    data = insert_lines(data, 12, split_lines(data)[11])

    def orphan(entry: dict[str, object]) -> None:
        entry["parentId"] = "ffffffff"

    data = edit_entry(data, 25, orphan)
    return glue_torn(data, 40, 30)


def fill(session: Session, turns: int = 30) -> None:
    """Turns, a compaction keeping the last few, one more turn: a session that rotates."""
    kept = None
    for i in range(turns):
        entry = session.append_message({"role": "user", "content": f"question {i} " + "x" * 200,
                                        "timestamp": 1})
        if i == turns - 5:
            kept = entry
        session.append_message({"role": "assistant", "content": [
            {"type": "text", "text": f"answer {i}"}], "provider": "anthropic",
            "model": "claude-x", "api": "anthropic-messages", "usage": {"input": 1, "output": 1},
            "stopReason": "stop", "timestamp": 2})
    session.append_compaction("what happened before", kept, 1000)
    session.append_message({"role": "user", "content": "after the compaction", "timestamp": 3})


@dataclass
class Database:
    """A database of four lineages: a damaged session, a rotatable one, a clean short one,
    and one rotated before (its sealed session reached through its live successor)."""

    url: str
    damaged: str
    rotatable: str
    clean: str
    sealed: str
    successor: str

    @property
    def live(self) -> list[str]:
        return [self.damaged, self.rotatable, self.clean, self.successor]


@pytest.fixture
def db(pg_url: str, tmp_path: Path) -> Database:
    def named(name: str) -> str:
        return session_url(pg_url, f"{name}-{uuid.uuid4().hex[:8]}")

    bad = named("damaged")
    as_storage(bad).create(damaged(tmp_path))
    rotatable = named("rotatable")
    with Session.create(rotatable, cwd="/w") as session:
        fill(session)
    clean = named("clean")
    with Session.create(clean, cwd="/w") as session:
        session.append_message({"role": "user", "content": "hello", "timestamp": 1})
    sealed = named("rotated-before")
    with Session.create(sealed, cwd="/w") as session:
        fill(session)
    result = rotate_database(sealed)
    assert result.rotated and result.successor_id is not None
    return Database(pg_url, bad, rotatable, clean, sealed,
                    session_url(pg_url, result.successor_id))


def generation(url: str) -> int | None:
    return as_storage(url).current_generation()


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_live_database_sessions_is_one_per_lineage(db: Database) -> None:
    from journal.pg.lineages import live_database_sessions

    assert sorted(live_database_sessions(db.url)) == sorted(
        [(db.damaged, 1), (db.rotatable, 1), (db.clean, 1), (db.successor, 2)])
    with pytest.raises(BadDatabaseUrl, match="names a session, not a database"):
        live_database_sessions(db.clean)


def test_repair_check_of_a_database_finds_the_damaged_session_and_changes_nothing(
        db: Database, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOURNAL_DATABASE_URL", db.url)
    before = {url: generation(url) for url in [*db.live, db.sealed]}
    code, out, err = run(capsys, "repair", "--check", "pg:")
    assert code == 1, err
    needs = [line for line in out.splitlines() if line.endswith(")") and "needs repair" in line]
    assert len(needs) == 1 and needs[0].startswith(f"{db.damaged}: needs repair (")
    # the table of a run over several, as for a folder, each session by its short name
    assert "repair summary" in out
    assert f"pg:{PostgresStorage.from_url(db.damaged).session} " in out
    assert err == ""
    assert {url: generation(url) for url in before} == before
    assert quarantined(db.damaged) == []

    code, out, _ = run(capsys, "repair", "--check", "--json", db.url)
    assert code == 1
    reports = [json.loads(line) for line in out.splitlines()]
    assert sorted(r["path"] for r in reports) == sorted(db.live)  # the sealed one: not apart
    assert {r["path"]: r["changed"] for r in reports} == {
        db.damaged: True, db.rotatable: False, db.clean: False, db.successor: False}
    assert all(r["dryRun"] for r in reports)


def test_repair_of_a_database_repairs_only_the_damaged_session(
        db: Database, capsys: pytest.CaptureFixture[str]) -> None:
    before = {url: generation(url) for url in [*db.live, db.sealed]}
    code, out, err = run(capsys, "repair", db.url)
    assert code == 0, err
    assert f"{db.damaged}: fixed " in out
    for url in (db.rotatable, db.clean, db.successor):
        assert f"{url}: clean" in out
    after = {url: generation(url) for url in before}
    assert after[db.damaged] != before[db.damaged]  # a new generation: the repaired session
    assert {u: g for u, g in after.items() if u != db.damaged} == {
        u: g for u, g in before.items() if u != db.damaged}
    assert quarantined(db.damaged)
    assert all(quarantined(url) == [] for url in (db.rotatable, db.clean, db.successor))

    code, out, _ = run(capsys, "repair", "--check", db.url)
    assert code == 0
    assert out.rstrip().endswith("all 4 sessions clean")


def test_rotate_of_a_database_rotates_the_rotatable_session_and_skips_the_rest(
        db: Database, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "rotate", db.url, "--dry-run", "--json")
    assert code == 0, err
    planned = json.loads(out)
    assert planned["dryRun"] and planned["counts"] == {
        "rotated": 1, "skipped": 3, "busy": 0, "failed": 0}
    assert stream_row(PostgresStorage.from_url(db.rotatable))["successor"] is None  # type: ignore[index]

    code, out, err = run(capsys, "rotate", db.url)
    assert code == 0, err
    row = stream_row(PostgresStorage.from_url(db.rotatable))
    assert row is not None and row["successor"] is not None
    assert f"{db.rotatable}: rotated into {session_url(db.url, row['successor'])}" in out
    for url in (db.damaged, db.clean, db.successor):
        assert stream_row(PostgresStorage.from_url(url))["successor"] is None  # type: ignore[index]
        assert f"{url}: not rotated: " in out
    assert out.rstrip().endswith(f"{db.url}: 4 session(s): rotated 1, skipped 3, busy 0, "
                                 "failed 0")
    progress = err.splitlines()
    assert len(progress) == 4 and all(line.startswith("journal: [") for line in progress)
    assert f"journal: [2/4] {db.rotatable}: rotated" in progress

    code, out, err = run(capsys, "rotate", db.url, "--json")  # again: nothing left to rotate
    assert code == 0, err
    done = json.loads(out)
    assert set(done) == {"database", "dryRun", "counts", "sessions"}
    assert done["database"] == db.url and done["dryRun"] is False
    assert done["counts"] == {"rotated": 0, "skipped": 4, "busy": 0, "failed": 0}
    sessions = {s["path"]: s for s in done["sessions"]}
    successor = session_url(db.url, row["successor"])
    assert set(sessions) == {db.damaged, successor, db.clean, db.successor}
    assert all(set(s) == {"path", "status", "reason", "result"} for s in sessions.values())
    assert "compaction" in sessions[db.clean]["reason"]
    assert sessions[db.clean]["result"]["rotated"] is False


@pytest.fixture
def held(db: Database) -> Iterator[subprocess.Popen[bytes]]:
    """The rotatable session held by a writer in another process (its lease taken)."""
    holder = subprocess.Popen([sys.executable, WORKER, "hold", db.rotatable, "holder"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env=ENV)
    assert holder.stdout is not None and holder.stdin is not None
    try:
        assert holder.stdout.readline() == b"held\n", holder.stderr.read()  # type: ignore[union-attr]
        yield holder
    finally:
        holder.stdin.write(b"go\n")
        holder.stdin.close()
        holder.wait(timeout=60)


def test_a_session_its_writer_holds_is_busy_and_the_others_are_done(
        db: Database, held: subprocess.Popen[bytes],
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "rotate", db.url, "--lock-timeout", "0.3", "--json")
    assert code == 1, err  # busy, none failed: as `rotate DIR`
    done = json.loads(out)
    assert done["counts"] == {"rotated": 0, "skipped": 3, "busy": 1, "failed": 0}
    [busy] = [s for s in done["sessions"] if s["status"] == "busy"]
    assert busy["path"] == db.rotatable and busy["result"] is None
    assert busy["reason"].startswith(f"pid {held.pid} ")
    assert busy["reason"].endswith("is writing it; left for a later run")
    assert f"{db.rotatable}: busy (pid {held.pid} " in err
    assert "Error:" not in err
    assert stream_row(PostgresStorage.from_url(db.rotatable))["successor"] is None  # type: ignore[index]

    before = generation(db.rotatable)
    code, out, err = run(capsys, "repair", db.url, "--lock-timeout", "0.3")
    assert code == 2  # as `repair DIR` with a file its writer holds: that one's error
    [error] = [line for line in err.splitlines() if line.startswith("Error:")]
    assert error.startswith(f"Error: {db.rotatable}: locked by pid {held.pid} ")
    assert f"{db.damaged}: fixed " in out  # the others are repaired all the same
    assert quarantined(db.damaged)
    assert generation(db.rotatable) == before


def test_options_a_database_does_not_take_are_refused_before_anything_is_done(
        db: Database, capsys: pytest.CaptureFixture[str]) -> None:
    before = {url: generation(url) for url in db.live}
    for argv, said in ((("rotate", db.url, "--no-compress"), "--no-compress is for files"),
                       (("rotate", db.url, "--keep", "1"), "give --archive-dir DIR too"),
                       (("repair", db.url, "--dialect", "claude"),  # a database, no session
                        "a database, not a Claude Code transcript (it holds pi sessions only)")):
        code, out, err = run(capsys, *argv)
        assert code == 2, argv
        [error] = err.splitlines()
        assert error.startswith("Error: ") and said in error, error
        assert out == ""
    assert {url: generation(url) for url in db.live} == before
    assert stream_row(PostgresStorage.from_url(db.rotatable))["successor"] is None  # type: ignore[index]
    # what a database holds is pi's: --dialect pi is taken, as for one of its sessions
    code, out, err = run(capsys, "repair", "--check", "--dialect", "pi", db.url)
    assert code == 1, err
    assert f"{db.damaged}: needs repair (" in out


def test_keep_with_an_archive_folder_exports_and_moves_archives_out(
        db: Database, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    archive = tmp_path / "archive"
    code, out, err = run(capsys, "rotate", db.url, "--archive-dir", str(archive), "--keep",
                         "0", "--json")
    assert code == 0, err
    sessions = {s["path"]: s for s in json.loads(out)["sessions"]}
    assert sessions[db.rotatable]["status"] == "rotated"
    # the lineage rotated before is not rotated again, but its archive is exported and moved
    # out, as `rotate URL --archive-dir --keep` of that session does when nothing rotates
    before = sessions[db.successor]
    assert before["status"] == "skipped"
    assert list(before["result"]["movedOut"]) == [db.sealed]
    assert stream_row(PostgresStorage.from_url(db.sealed))["moved_out_at"] is not None  # type: ignore[index]
    moved = [*sessions[db.rotatable]["result"]["movedOut"].values(),
             *before["result"]["movedOut"].values()]
    assert sorted(p.name for p in archive.iterdir()) == sorted(map(os.path.basename, moved))


def test_an_empty_database_and_one_without_the_schema_are_refused(
        pg_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (("repair", "--check", pg_url), ("repair", pg_url), ("rotate", pg_url)):
        code, out, err = run(capsys, *argv)
        assert code == 2, argv
        [error] = err.splitlines()
        assert "no journal schema in this database" in error, error
        assert out == ""
    with psycopg.connect(pg_url) as conn:  # nothing was made
        assert conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'journal'"
                            ).fetchone() == (0,)

    connect(pg_url).close()  # a writer's connection makes the schema: no session yet
    for argv in (("repair", "--check", pg_url), ("repair", pg_url), ("rotate", pg_url),
                 ("rotate", pg_url, "--json")):
        code, out, err = run(capsys, *argv)
        assert code == 2, argv
        assert err.splitlines() == [f"Error: {pg_url}: no sessions in this database"], argv
        assert out == ""


def test_a_broken_lineage_is_its_own_error_or_skip_and_the_others_are_done(
        db: Database, capsys: pytest.CaptureFixture[str]) -> None:
    """The successor of the lineage rotated before deleted out of band: its sealed session
    is that lineage's last; repairing it is an error naming the missing session (as `repair
    URL` of it is), rotating it is skipped with that reason (as a folder's sealed file whose
    successor is not there)."""
    missing = PostgresStorage.from_url(db.successor).session
    with psycopg.connect(db.url, autocommit=True) as conn:
        conn.execute("DELETE FROM journal.streams WHERE session = %s", (missing,))

    code, out, err = run(capsys, "repair", "--check", db.url)
    assert code == 2
    [error] = [line for line in err.splitlines() if line.startswith("Error:")]
    assert error.startswith(f"Error: {db.sealed}: the lineage is broken: ") and missing in error
    # the others are checked all the same (an error ends --check before its per-session
    # lines, as for a folder: the table says it)
    assert "needs repair" in out

    code, out, err = run(capsys, "rotate", db.url, "--json")
    assert code == 0, err
    sessions = {s["path"]: s for s in json.loads(out)["sessions"]}
    assert sessions[db.rotatable]["status"] == "rotated"
    assert sessions[db.sealed]["status"] == "skipped"
    assert sessions[db.sealed]["reason"].startswith("the lineage is broken: ")
    assert missing in sessions[db.sealed]["reason"]


def test_rotate_of_a_database_skips_a_version_1_session_and_says_how_to_rotate_it(
        pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A session pushed as pi wrote it, at format version 1: `rotate pg:` (the nightly job)
    exited 2 every night for it ("failed"). It is skipped, with what rotates it."""
    from test_rotate_folder import version_1_session

    from journal.pg.transfer import push

    old = tmp_path / "old.jsonl"
    version_1_session(old)
    push(str(old), pg_url)
    url = session_url(pg_url, "v1-session")
    code, out, err = run(capsys, "rotate", pg_url, "--json")
    assert code == 0, (out, err)
    report = json.loads(out)
    assert report["counts"] == {"rotated": 0, "skipped": 1, "busy": 0, "failed": 0}
    (row,) = report["sessions"]
    assert row["status"] == "skipped", row
    assert row["reason"] == ("session format version 1: only version 3 sessions rotate; run "
                             f"'journal repair --migrate {url}' first"), row
